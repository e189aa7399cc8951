"""What the simulated model writes, and which content class a prompt belongs to.

Content class rule (first match wins):
1. header `X-Sim-Class: code|text|reasoning`;
2. the prompt contains a code marker (CODE_MARKERS: a fence, `def `, `class `, `import `,
   `function `, `#include`, `fn `, `=> `, `};`) -> "code";
3. otherwise "text".
Reasoning output (thinking on) always uses the "reasoning" class, whatever the prompt.

Output is made of whole lines from a small corpus per class. Every line starts with whitespace
and none ends with it, so any run of consecutive output tokens re-tokenizes to exactly the same
tokens: a chunk carrying n tokens has text that the simulator's tokenizer counts as n.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from decodescope.sim.tokenizer import tokenize

CODE_MARKERS = ("```", "def ", "class ", "import ", "function ", "#include", "fn ", "=> ", "};")

_CODE_LINES = (
    "\ndef load_items(path):",
    "\n    with open(path) as handle:",
    "\n        return [line.strip() for line in handle if line.strip()]",
    "\n\ndef total_cost(items, rate=0.2):",
    "\n    subtotal = sum(item.price * item.quantity for item in items)",
    "\n    return round(subtotal * (1 + rate), 2)",
    "\n\nclass Cache:",
    "\n    def __init__(self, size=128):",
    "\n        self.size = size",
    "\n        self.entries = {}",
    "\n    def get(self, key, default=None):",
    "\n        return self.entries.get(key, default)",
    "\n    def put(self, key, value):",
    "\n        if len(self.entries) >= self.size:",
    "\n            self.entries.pop(next(iter(self.entries)))",
    "\n        self.entries[key] = value",
    "\n\nfor index, value in enumerate(values):",
    "\n    if value is None:",
    "\n        continue",
    "\n    results.append(transform(value, index))",
    "\n\nif __name__ == \"__main__\":",
    "\n    main(sys.argv[1:])",
)

_TEXT_LINES = (
    " The committee met on Tuesday to review the budget for the coming year.",
    " Several members raised concerns about rising maintenance costs.",
    " A small garden can feed a family through most of the summer.",
    " Rain fell steadily over the valley, and the river rose by evening.",
    " Historians still argue about the causes of the long decline.",
    " She packed a map, two apples, and a worn notebook before leaving.",
    " Prices in the market changed little during the first quarter.",
    " The old bridge was closed for repairs until the end of spring.",
    " Most visitors arrive by train and walk the last mile to the village.",
    " In the end, the plan was simpler than anyone had expected.",
    "\n\n Travel writers often praise the quiet streets near the harbour.",
    " Each chapter opens with a short letter from the author.",
)

_REASONING_LINES = (
    " Okay, let me think about what the user is asking for.",
    " First, I should check the constraints in the question.",
    " The input could be empty, so that case needs handling.",
    " Wait, maybe there is a simpler way to do this.",
    " Let me verify the edge cases one more time.",
    " So the answer should follow from the second step.",
    " Hmm, that does not match what I computed before.",
    " I think the approach is correct, now I can write it down.",
)

_LINES = {"code": _CODE_LINES, "text": _TEXT_LINES, "reasoning": _REASONING_LINES}
_TOKENIZED = {cls: tuple(tuple(tokenize(line)) for line in lines) for cls, lines in _LINES.items()}


def classify_prompt(prompt_text: str) -> str:
    return "code" if any(m in prompt_text for m in CODE_MARKERS) else "text"


def token_stream(content_class: str, rng: random.Random) -> Iterator[str]:
    """An endless, deterministic stream of output tokens of one class."""
    lines = _TOKENIZED[content_class]
    while True:
        yield from lines[rng.randrange(len(lines))]


def corpus_lines(content_class: str) -> tuple[str, ...]:
    return _LINES[content_class]
