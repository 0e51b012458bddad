import json
from pathlib import Path
import pytest
from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.test_request_conformance_llama import run, items, tool_llama, FAULTS

@pytest.mark.parametrize("i", range(-1, len(FAULTS)))
def test_peek(pytester, tool_llama, tiny_tool, i):
    if i < 0:
        r = run(pytester, tool_llama, tiny_tool)
    else:
        with FaultyProxy(tool_llama, FAULTS[i][0]) as proxy:
            r = run(pytester, proxy.url, tiny_tool)
    print("FAULT", FAULTS[i][0] if i >= 0 else None)
    print(r.stdout.str()[-1500:])
    for n, it in items(pytester).items():
        if i < 0 or it["outcome"] != "passed":
            print(n, it["outcome"], json.dumps(it["data"])[:700], it.get("violations"))
