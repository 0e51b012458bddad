"""The proxy's ``cut_prompt`` fault (:func:`tests.faulty_proxy.cut_prompt`): the first half of
a generation request's prompt dropped, ids or text, in place."""

from __future__ import annotations

from typing import Any

from tests.faulty_proxy import cut_prompt


def test_ids_text_and_messages_lose_their_first_half() -> None:
    ids: dict[str, Any] = {"prompt": [1, 2, 3, 4, 5, 6, 7]}
    assert cut_prompt(ids) and ids["prompt"] == [4, 5, 6, 7]
    text: dict[str, Any] = {"prompt": "12+34="}
    assert cut_prompt(text) and text["prompt"] == "34="
    sglang: dict[str, Any] = {"input_ids": [9, 8, 7, 6]}
    assert cut_prompt(sglang) and sglang["input_ids"] == [7, 6]
    chat: dict[str, Any] = {
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "abcd"}]
    }
    assert cut_prompt(chat) and chat["messages"][-1] == {"role": "user", "content": "cd"}
    assert chat["messages"][0] == {"role": "system", "content": "s"}


def test_nothing_to_cut_is_left_alone() -> None:
    one: dict[str, Any] = {"prompt": [1]}
    assert not cut_prompt(one) and one == {"prompt": [1]}
    assert not cut_prompt({"content": "x"})
