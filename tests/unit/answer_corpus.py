r"""A hand-written corpus of hard answer-extraction cases (see ``test_metrics_answers.py``).

Every expected value was written by hand from what a careful human grader would read as the
reply's final answer, or ``None`` where a careful grader would refuse to pick one. Values:

* ``number``: a string read by :class:`fractions.Fraction` (``"0.75"``, ``"1/3"``, ``"-7"``);
* ``boolean``: ``True`` / ``False``;
* ``choice``: the upper-case letter;
* ``json``: the canonical form (sorted keys, no spaces, numbers by value);
* ``code``: the normalised code; ``exact``: the whitespace-collapsed text;
* ``tool_call``: the canonical calls (a JSON list of ``{"arguments":...,"name":...}``, keys
  sorted, no spaces, whole numbers without ``.0``; a malformed block as ``"name":""`` with its
  stripped text as the arguments string).
"""

from __future__ import annotations

import json
from typing import NamedTuple

from pytest_infercheck.metrics.answers import FlipKind


class Case(NamedTuple):
    kind: str
    text: str
    expected: object  # None: no answer
    note: str = ""


class Pair(NamedTuple):
    """A reference (gold) answer and an output that must (not) be scored equal to it."""

    kind: str
    reference: str
    output: str
    equal: bool
    note: str = ""


class Judged(NamedTuple):
    kind: str
    reference: str | None
    base: str
    test: str
    flip: FlipKind
    note: str = ""


N, B, C, J, K, E = "number", "boolean", "choice", "json", "code", "exact"
T = "tool_call"
ADD_12_34 = '[{"arguments":{"a":12,"b":34},"name":"add"}]'


def malformed(block: str) -> str:
    """The canonical answer of one malformed ``<tool_call>`` block: no name, its stripped
    text as the arguments string."""
    return '[{"arguments":' + json.dumps(block, ensure_ascii=False) + ',"name":""}]'


CASES: list[Case] = [
    # ------------------------------------------------------------------ number: reasoning
    Case(N, "<think>The answer is 17.</think>\n42", "42", "issue: thinking block stripped"),
    Case(N, "Let me see. The answer is 17.</think>\n42", "42", "issue: Qwen3 closing tag only"),
    Case(N, "<think>The answer is 17.</think>", None, "issue: nothing after the block"),
    Case(N, "<think>The answer is 17.</think>\n\n", None, "only whitespace after the block"),
    Case(N, "<think>6 * 7 = 42, so the answer is 42", None, "unclosed block: all reasoning"),
    Case(N, "<think>\n2+2=4\n</think>\n\nThe answer is 4.", "4"),
    Case(N, "<think>a</think>draft 3<think>b: 5</think>The answer is 9", "9", "last close"),
    Case(N, "<THINK>17</THINK> 42", "42", "tags are case-insensitive"),
    Case(N, "The answer is 8 <think>hmm, maybe 9", "8", "a later unclosed block is cut off"),
    Case(N, "</think>", None),
    Case(N, "<thinking>It is 3.</thinking>Answer: 4", "4", "<thinking> tags too"),
    # ------------------------------------------------------------------ number: fractions
    Case(N, "The answer is 3/4", "3/4", "issue: fraction is 0.75, not 4"),
    Case(N, "\\frac{3}{4}", "3/4", "issue: latex fraction"),
    Case(N, "So the probability is $\\boxed{\\frac{3}{4}}$.", "3/4"),
    Case(N, "\\boxed{\\frac{1}{2}}", "1/2"),
    Case(N, "\\boxed{\\dfrac{-1}{4}}", "-1/4"),
    Case(N, "x = -\\frac{3}{4}", "-3/4"),
    Case(N, "The answer is -3/4.", "-3/4"),
    Case(N, "The ratio is 2/6", "1/3", "kept exact, not 0.333"),
    Case(N, "The answer is 1 3/4 cups", "7/4", "mixed number"),
    Case(N, "The answer is 1/0", None, "division by zero is not a number"),
    Case(N, "It happened on 3/4/2024.", None, "a date is not a fraction"),
    Case(N, "The answer is \\frac{6}{3}", "2"),
    # ------------------------------------------------------------------ number: grouping
    Case(N, "1,23", None, "issue: invalid grouping is refused"),
    Case(N, "3,5", None, "issue: decimal comma is refused"),
    Case(N, "The answer is 3,5", None, "the marked answer is malformed"),
    Case(N, "The result is 3,5", None),
    Case(N, "The answer is 1,2345", None),
    Case(N, "The answer is 1,234,56", None),
    Case(N, "The answer is 1,23,456", None, "Indian grouping is ambiguous here"),
    Case(N, "1,2,3", None, "a list without spaces"),
    Case(N, "Coordinates 3,5 so the answer is 8", "8", "unambiguous: the marker"),
    Case(N, "I counted 1,234 items", "1234"),
    Case(N, "1,234,567", "1234567"),
    Case(N, "The answer is 3,000,000", "3000000"),
    Case(N, "It costs 1,234.56", "1234.56"),
    Case(N, "\\boxed{1{,}234}", "1234", "latex {,} separator"),
    Case(N, "The numbers are 1, 2, 3", "3"),
    Case(N, "In 2024, there were 15 cases.", "15"),
    # ------------------------------------------------------------------ number: markers
    Case(N, "The answer is 5... wait, the answer is 6", "6", "retraction: last marker"),
    Case(N, "Step 1: 4 + 5 = 9\n#### 72\nThat took 3 steps", "72", "GSM8K"),
    Case(N, "#### 1,000", "1000"),
    Case(N, "The answer is 42. Double-check: \\boxed{41}", "41", "last marker wins"),
    Case(N, "\\boxed{41}\nHmm, recheck. So the final answer is 42", "42"),
    Case(N, "Answer: 42\nAnswer: 43", "43"),
    Case(N, "**Answer:** 8", "8"),
    Case(N, "The answer is **1,024**.", "1024"),
    Case(N, "The answer is 12 apples", "12"),
    Case(N, "Answer: 18 (from 3 groups of 6)", "18"),
    Case(N, "The final answer is: **-7** after 2 tries", "-7"),
    Case(N, "The answer is $\\boxed{42}$.", "42"),
    Case(N, "\\boxed{\\boxed{5}}", "5", "nested boxes"),
    Case(N, "\\boxed{x = 5}", "5"),
    Case(N, "\\boxed{3, 5}", None, "two numbers in the final box"),
    Case(N, "The answer is 3 + 4 = 7", "7", "a marked expression: its result"),
    Case(N, "The answer is 42 km/h", "42", "units"),
    Case(N, "The answer is 6, it isn't 4", "6"),
    Case(N, "Answer: twelve", None),
    Case(N, "The answer: 0.1 + 0.2 = 0.30000000000000004", "0.30000000000000004"),
    # ------------------------------------------------------------------ number: last number
    Case(N, "So 7 \u00d7 6 = 42", "42"),
    Case(N, "a = 3 and b = 5", "5"),
    Case(N, "pages 10-20", "20", "a hyphen between numbers is not a sign"),
    Case(N, "It's 5, not 4.", "5", "a negated number is skipped"),
    Case(N, "The answer is not 4", None),
    Case(N, "It isn't 4", None),
    Case(N, "no numbers here", None),
    Case(N, "", None),
    Case(N, "Temperatures: -3 and then -7", "-7"),
    Case(N, "Step 1: 10/2 = 5\nStep 2: 5 + 3 = 8", "8"),
    Case(N, "v1.2.3 is installed", None, "a version is not a number"),
    # ------------------------------------------------------------------ number: forms
    Case(N, "The answer is \u22125", "-5", "unicode minus"),
    Case(N, "3 \u2212 5 = \u22122", "-2"),
    Case(N, "-0", "0", "negative zero is zero"),
    Case(N, "The answer is -0.0", "0"),
    Case(N, "1e3", "1000"),
    Case(N, "1E3", "1000"),
    Case(N, "The answer is 1.2345e4", "12345"),
    Case(N, "The value is 1.5e-3", "0.0015"),
    Case(N, "2.5 \u00d7 10^3", "2500"),
    Case(N, "\\boxed{2 \\times 10^{3}}", "2000"),
    Case(N, "The answer is 10^{-3}", "1/1000"),
    Case(N, "It grew by 50%", "50", "a percent sign is dropped"),
    Case(N, "The answer is 12.5\\%", "12.5"),
    Case(N, "She paid $1,000.", "1000"),
    Case(N, "The answer is -$5", "-5"),
    Case(N, "The answer is 3.", "3", "trailing full stop"),
    Case(N, "The answer is 0.30", "0.3"),
    Case(N, "about .5 of them", "0.5"),
    Case(N, "12345", "12345"),
    # ------------------------------------------------------------------ boolean
    Case(B, "<think>yes</think>No", False),
    Case(B, "I think yes.</think>\nNo.", False, "closing tag only"),
    Case(B, "<think>The answer is yes", None, "unclosed block"),
    Case(B, "<think>Yes.</think>", None, "nothing after the block"),
    Case(B, "Yes, but no.", False, "issue: the final answer, not the first word"),
    Case(B, "No. On second thought, yes.", True),
    Case(B, "The answer is yes. Wait, the answer is no.", False, "last marker"),
    Case(B, "Answer: no. Answer: yes.", True),
    Case(B, "Yes, well, on reflection the answer is no", False),
    Case(B, "The answer is yes, and no other option fits.", True, "the marker wins"),
    Case(B, "Yes", True),
    Case(B, "yes.", True),
    Case(B, "TRUE", True),
    Case(B, "No", False),
    Case(B, "No, it is not.", False),
    Case(B, "**No**, because it is odd", False),
    Case(B, "It is false.", False),
    Case(B, "not true", False),
    Case(B, "It isn't true that cats bark", False),
    Case(B, "That statement is not false", True),
    Case(B, "The answer is not yes", False),
    Case(B, "The answer is no.", False),
    Case(B, "Answer: True", True),
    Case(B, "The answer is: **Yes**", True),
    Case(B, "\\boxed{\\text{Yes}}", True),
    Case(B, "So \\boxed{No}", False),
    Case(B, "There is no doubt that it is true", True, "'no' as a determiner"),
    Case(B, "Yes, no doubt.", True),
    Case(B, "I'd say no", False),
    Case(B, "The claim is true? No, it's false.", False),
    Case(B, "Yes. (You asked me to answer true or false.)", True, "'true or false' is not one"),
    Case(B, "I cannot say", None),
    Case(B, "There is no way to know", None),
    Case(B, "", None),
    # ------------------------------------------------------------------ choice
    Case(C, "\\boxed{C}", "C", "issue: boxed letter"),
    Case(C, "The answer is b", "B", "issue: lower-case letter after a marker"),
    Case(C, "The answer is b.", "B"),
    Case(C, "The answer is a.", "A"),
    Case(C, "The answer is a cat", None, "'a' is an article"),
    Case(C, "A cat sat on the mat", None),
    Case(C, "(C)", "C"),
    Case(C, "[C]", "C"),
    Case(C, "Option C", "C"),
    Case(C, "b", "B", "a bare reply"),
    Case(C, "(b)", "B"),
    Case(C, "<think>The answer is (A)</think>The answer is (D)", "D"),
    Case(C, "The answer is (A)</think>\nAnswer: B", "B", "closing tag only"),
    Case(C, "<think>It's (B)", None),
    Case(C, "Answer: C", "C"),
    Case(C, "Answer: (C)", "C"),
    Case(C, "answer: [d]", "D"),
    Case(C, "The answer is (d).", "D"),
    Case(C, "The answer is: **C**", "C"),
    Case(C, "Answer: Option B", "B"),
    Case(C, "The correct option is C", "C"),
    Case(C, "I'd pick choice E.", "E"),
    Case(C, "The answer is B because A is wrong", "B"),
    Case(C, "The answer is A. Wait, the answer is B.", "B", "last marker"),
    Case(C, "\\boxed{A}\nOn reflection, the final answer is D", "D"),
    Case(C, "\\boxed{\\text{(B)}}", "B"),
    Case(C, "\\boxed{(D)}", "D"),
    Case(C, "B. Paris", "B"),
    Case(C, "E", "E"),
    Case(C, "I think (A) is wrong because of X, so (C)", "C"),
    Case(C, "Between (A) and (B), I choose (B).", "B"),
    Case(C, "Looking at option D, it is correct.", "D"),
    Case(C, "**A**", "A"),
    Case(C, "The answer is not (A)", None),
    Case(C, "F", None),
    Case(C, "(a) first point (b) second point", None, "an enumeration, not a choice"),
    Case(C, "", None),
    # ------------------------------------------------------------------ json
    Case(J, '{"b": 1, "a": 2}', '{"a":2,"b":1}', "key order ignored"),
    Case(J, '{"a": 1.0}', '{"a":1}', "issue: 1.0 is 1"),
    Case(J, '{"a": 1e0}', '{"a":1}'),
    Case(J, '{"a": 100}', '{"a":100}'),
    Case(J, '{"a": 1E2}', '{"a":100}'),
    Case(J, '{"a": true}', '{"a":true}', "a boolean stays a boolean"),
    Case(J, '{"a": 0.30}', '{"a":0.3}'),
    Case(J, '{"a": 0.001}', '{"a":0.001}'),
    Case(J, '{"n": -0}', '{"n":0}'),
    Case(J, '{"x": null, "y": [1.50, 2]}', '{"x":null,"y":[1.5,2]}'),
    Case(J, '{"big": 12345678901234567890123456789}', '{"big":12345678901234567890123456789}'),
    Case(J, '{"a": 1E400}', '{"a":1e400}'),
    Case(J, '{"a": 1} and that is the object.', '{"a":1}', "trailing text"),
    Case(J, 'Result: {"b": [1, 2], "a": {"y": 1, "x": 0}} done', '{"a":{"x":0,"y":1},"b":[1,2]}'),
    Case(J, '<think>{"a": 1}</think>{"a": 2}', '{"a":2}'),
    Case(J, '<think>{"a": 1}', None),
    Case(J, '```json\n{"a": 1}\n```\nFixed:\n```json\n{"a": 2}\n```', '{"a":2}', "last fence"),
    Case(J, 'Output:\n```json\n{"a": 1,}\n```', None, "the fenced answer is invalid"),
    Case(J, 'See ref [1]. Output:\n```json\n{"k": "v"}\n```', '{"k":"v"}'),
    Case(J, '```\n{"a": 2}\n```', '{"a":2}', "unlabelled fence"),
    Case(J, '```python\nprint(1)\n```\n{"a": 1}', '{"a":1}', "a python fence is not JSON"),
    Case(J, "List: [3, 1, 2]", "[3,1,2]", "arrays keep their order"),
    Case(J, 'broken {"a": } then {"ok": true}', '{"ok":true}'),
    Case(J, '{"s": "caf\u00e9"}', '{"s":"caf\u00e9"}'),
    Case(J, '{"a": NaN}', None, "NaN is not JSON"),
    Case(J, "no json here {oops}", None),
    # ------------------------------------------------------------------ code
    Case(K, "```python\nx = 1\n```\nUsage:\n```python\nprint(x)\n```", "print(x)", "last fence"),
    Case(
        K,
        "Here:\n```python\n\ndef f():   \n    return 1\n\n```\nHope it helps",
        "def f():\n    return 1",
    ),
    Case(K, "~~~py\nprint('hi')\n~~~", "print('hi')"),
    Case(K, "```js\nlet a = 1;  \r\nlet b = 2;\n", "let a = 1;\nlet b = 2;", "unterminated"),
    Case(K, "```rust\nfn main() {}\n```", "fn main() {}"),
    Case(K, "```bash\necho hi\n```", "echo hi"),
    Case(K, "````md\n```py\nx\n```\n````", "```py\nx\n```", "a longer fence nests"),
    Case(K, "\n\n  x = 1   \n  y = 2\n\n", "  x = 1\n  y = 2", "no fence: the whole text"),
    Case(K, "x = 1\r\ny = 2\r\n", "x = 1\ny = 2", "CRLF"),
    Case(K, "\tif x:\t \n\t\treturn 1", "\tif x:\n\t\treturn 1", "tabs kept, trailing stripped"),
    Case(K, "<think>```python\nbad()\n```</think>```python\ngood()\n```", "good()"),
    Case(K, "plan it.</think>\ndef f(): pass", "def f(): pass"),
    Case(K, "<think>```python\nx = 1\n```", None),
    Case(K, "   \n  ", None),
    # ------------------------------------------------------------------ exact
    Case(E, "  Paris   is\n the  Capital ", "Paris is the Capital"),
    Case(E, "<think>Lyon?</think>Paris", "Paris"),
    Case(E, "Let me think.</think>\n\nParis\n", "Paris"),
    Case(E, "<think>Paris", None),
    Case(E, " \n ", None),
    Case(E, "paris", "paris", "case is kept"),
    Case(E, "Paris.", "Paris.", "punctuation is kept"),
    Case(E, "`Paris`", "`Paris`"),
    # ------------------------------------------------------------------ tool_call
    Case(
        T, '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 34}}\n</tool_call>', ADD_12_34
    ),
    Case(T, '<tool_call>{"arguments": {"b": 34, "a": 12}, "name": "add"}</tool_call>', ADD_12_34),
    Case(
        T,
        '<tool_call> {"name": "add", "arguments": {"a": 12.0, "b": 3.4e1}} </tool_call>',
        ADD_12_34,
        "numbers by value",
    ),
    Case(
        T,
        'Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 34}}',
        ADD_12_34,
        "unclosed at the end: read to the end, as vLLM's hermes parser does",
    ),
    Case(
        T,
        '<think><tool_call>{"name": "get_date", "arguments": {}}</tool_call></think>'
        '<tool_call>{"name": "add", "arguments": {"a": 12, "b": 34}}</tool_call>',
        ADD_12_34,
        "a call while thinking is not a call",
    ),
    Case(
        T,
        '<tool_call>{"name": "get_date", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"city": "Oslo"}}</tool_call>',
        '[{"arguments":{},"name":"get_date"},{"arguments":{"city":"Oslo"},"name":"get_time"}]',
        "two calls, in order",
    ),
    Case(
        T,
        '<tool_call>{"name": "add", "arguments": {"a": 12, "b": }}</tool_call>',
        malformed('{"name": "add", "arguments": {"a": 12, "b": }}'),
        "not JSON: a malformed call, kept",
    ),
    Case(T, '<tool_call>{"arguments": {}}</tool_call>', malformed('{"arguments": {}}'), "no name"),
    Case(
        T,
        '<tool_call>{"name": "", "arguments": {}}</tool_call>',
        malformed('{"name": "", "arguments": {}}'),
        "an empty name",
    ),
    Case(
        T,
        '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>',
        malformed('{"name": "add", "arguments": "{\\"a\\": 1}"}'),
        "arguments as a string of JSON: malformed",
    ),
    Case(
        T,
        '<tool_call>{"name": "get_date"}</tool_call>',
        malformed('{"name": "get_date"}'),
        "no arguments: malformed (a zero-argument call writes {})",
    ),
    Case(
        T,
        '<tool_call>\n{"name": "add", "arguments": {"a": NaN}}\n</tool_call>',
        malformed('{"name": "add", "arguments": {"a": NaN}}'),
        "NaN is not JSON; the block's text is stripped",
    ),
    Case(
        T,
        '<tool_call>{"name": "add", "arguments": {"a": 12, "b": 34}}</tool_call>'
        '<tool_call>{"name": "add", "arguments": {"a": 12, "b": 3</tool_call>',
        '[{"arguments":{"a":12,"b":34},"name":"add"},'
        + malformed('{"name": "add", "arguments": {"a": 12, "b": 3')[1:],
        "a call and a malformed one: both kept, in order",
    ),
    Case(T, "The sum is 46.", None, "prose: no call"),
    Case(T, '{"name": "add", "arguments": {"a": 12, "b": 34}}', None, "JSON without the tags"),
    Case(
        T,
        '<think><tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',
        None,
        "unclosed thinking: all reasoning",
    ),
    Case(T, "</tool_call>", None, "a closing tag alone"),
]


PAIRS: list[Pair] = [
    Pair(N, "3/4", "The answer is 0.75", True, "fraction reference, decimal output"),
    Pair(N, "0.75", "\\frac{3}{4}", True),
    Pair(N, "1/3", "\\frac{2}{6}", True),
    Pair(N, "1/3", "0.333", False, "exact compare"),
    Pair(N, "12345", "12,345", True),
    Pair(N, "12345", "1.2345e4", True),
    Pair(N, "0.3", "0.30", True),
    Pair(N, "1000", "1e3", True),
    Pair(N, "50", "50%", True),
    Pair(N, "0", "-0", True),
    Pair(N, "-5", "\u22125", True),
    Pair(N, "1,234", "1234.0", True),
    Pair(N, "$12", "The answer is 12", True),
    Pair(N, "0.3", "0.31", False),
    Pair(J, '{"a":1}', '{"a": 1.0}', True),
    Pair(J, '{"a":1}', '{"a": true}', False, "true is not 1"),
    Pair(J, '{"a":0}', '{"a": false}', False),
    Pair(J, '{"a":[1,2]}', '{"a": [2, 1]}', False),
    Pair(J, '{"a":1,"b":2}', '{"b": 2, "a": 1}', True),
    Pair(B, "yes", "True.", True),
    Pair(B, "no", "Yes, but no.", True),
    Pair(C, "b", "\\boxed{B}", True),
    Pair(C, "(C)", "The answer is c", True),
    Pair(K, "x = 1", "```python\nx = 1   \n```", True),
    Pair(E, "Paris", "paris", False),
    Pair(E, "Paris", "<think>Lyon</think> Paris ", True),
]


JUDGED: list[Judged] = [
    Judged(N, "42", "<think>41</think>42", "<think>42</think>41", FlipKind.CORRECT_TO_WRONG),
    Judged(
        N,
        "8",
        "5... wait, the answer is 8",
        "the answer is 8... no, the answer is 5",
        FlipKind.CORRECT_TO_WRONG,
    ),
    Judged(N, "3/4", "0.75", "\\frac{3}{4}", FlipKind.UNCHANGED),
    Judged(J, None, '{"a": 1}', '{"a": 1.0}', FlipKind.UNCHANGED, "issue: no spurious flip"),
    Judged(J, None, '{"a": 1}', '{"a": true}', FlipKind.CHANGED),
    Judged(B, "yes", "Yes, but no.", "Yes.", FlipKind.WRONG_TO_CORRECT),
    Judged(C, "C", "The answer is c", "\\boxed{D}", FlipKind.CORRECT_TO_WRONG),
    Judged(N, "7", "<think>7", "<think>6", FlipKind.UNCHANGED, "both: no answer"),
]
