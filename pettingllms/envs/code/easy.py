"""`code_easy`: short HumanEval-style function tasks, for RL at CPU scale (env.data=code_easy).

HumanEval is far beyond a 135M model (untrained success 0), so its groups carry no signal.
These tasks are one- or two-line functions (add a constant, count a character, keep the even
numbers, ...), each with a signature, a docstring with an example, a reference solution and 4
assert tests. Tasks are drawn from templates with seeded parameters (constants, names); a template's
constants are split between train and test, so no test function is also a train function.
Every test is checked against the reference in the sandbox before it is kept
(`verify_function_rows`), exactly as the HumanEval rows are.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable

from pettingllms.envs.code.rows import verify_function_rows, write_split
from pettingllms.envs.dataset import new_output_dir
from pettingllms.utils.progress import Progress

# name -> (signature, docstring, body, python implementation, argument sampler, constant range)
# `{n}` in a template is the task's constant; the sampler draws one call's arguments.
_Sampler = Callable[[random.Random], tuple]


def _ints(lo: int, hi: int, k: int = 1) -> _Sampler:
    return lambda rng: tuple(rng.randint(lo, hi) for _ in range(k))


def _int_list(rng: random.Random) -> tuple:
    return ([rng.randint(-9, 9) for _ in range(rng.randint(1, 5))],)


def _word(rng: random.Random) -> tuple:
    return ("".join(rng.choice("abcdeiou") for _ in range(rng.randint(1, 7))),)


TEMPLATES: dict[str, tuple[str, str, str, Callable[..., Any], _Sampler, tuple[int, int]]] = {
    "add_{n}": ("(x: int) -> int", "Return x plus {n}.", "return x + {n}",
                lambda n, x: x + n, _ints(-20, 20), (1, 30)),
    "times_{n}": ("(x: int) -> int", "Return x multiplied by {n}.", "return x * {n}",
                  lambda n, x: x * n, _ints(-10, 10), (2, 12)),
    "minus_{n}": ("(x: int) -> int", "Return x minus {n}.", "return x - {n}",
                  lambda n, x: x - n, _ints(-20, 20), (1, 30)),
    "is_multiple_of_{n}": ("(x: int) -> bool", "Return True if x is divisible by {n}, else False.",
                           "return x % {n} == 0", lambda n, x: x % n == 0, _ints(0, 40), (2, 9)),
    "greater_than_{n}": ("(x: int) -> bool", "Return True if x is greater than {n}, else False.",
                         "return x > {n}", lambda n, x: x > n, _ints(-20, 20), (-5, 10)),
    "repeat_{n}": ("(s: str) -> str", "Return the string s repeated {n} times.", "return s * {n}",
                   lambda n, s: s * n, _word, (2, 5)),
    "count_{c}": ("(s: str) -> int", "Return how many times the letter '{c}' occurs in s.",
                  "return s.count('{c}')", lambda c, s: s.count(c), _word, (0, 7)),
    "sum_list": ("(xs: list) -> int", "Return the sum of the numbers in xs.", "return sum(xs)",
                 lambda n, xs: sum(xs), _int_list, (0, 0)),
    "max_list": ("(xs: list) -> int", "Return the largest number in xs.", "return max(xs)",
                 lambda n, xs: max(xs), _int_list, (0, 0)),
    "min_list": ("(xs: list) -> int", "Return the smallest number in xs.", "return min(xs)",
                 lambda n, xs: min(xs), _int_list, (0, 0)),
    "keep_even": ("(xs: list) -> list", "Return the even numbers of xs, in order.",
                  "return [x for x in xs if x % 2 == 0]", lambda n, xs: [x for x in xs if x % 2 == 0],
                  _int_list, (0, 0)),
    "reverse_string": ("(s: str) -> str", "Return s reversed.", "return s[::-1]",
                       lambda n, s: s[::-1], _word, (0, 0)),
    "first_{n}_chars": ("(s: str) -> str", "Return the first {n} characters of s (all of s if it is shorter).",
                        "return s[:{n}]", lambda n, s: s[:n], _word, (1, 4)),
    "square": ("(x: int) -> int", "Return x squared.", "return x * x", lambda n, x: x * x,
               _ints(-12, 12), (0, 0)),
    "absolute": ("(x: int) -> int", "Return the absolute value of x.", "return abs(x)",
                 lambda n, x: abs(x), _ints(-30, 30), (0, 0)),
    "list_length": ("(xs: list) -> int", "Return how many items xs has.", "return len(xs)",
                    lambda n, xs: len(xs), _int_list, (0, 0)),
    # a step harder: a filter or a comparison inside the one line
    "sum_even": ("(xs: list) -> int", "Return the sum of the even numbers in xs.",
                 "return sum(x for x in xs if x % 2 == 0)", lambda n, xs: sum(x for x in xs if x % 2 == 0),
                 _int_list, (0, 0)),
    "count_positive": ("(xs: list) -> int", "Return how many numbers in xs are greater than 0.",
                       "return sum(1 for x in xs if x > 0)", lambda n, xs: sum(1 for x in xs if x > 0),
                       _int_list, (0, 0)),
    "double_all": ("(xs: list) -> list", "Return a new list with every number of xs doubled.",
                   "return [2 * x for x in xs]", lambda n, xs: [2 * x for x in xs], _int_list, (0, 0)),
    "max_minus_min": ("(xs: list) -> int", "Return the largest number in xs minus the smallest.",
                      "return max(xs) - min(xs)", lambda n, xs: max(xs) - min(xs), _int_list, (0, 0)),
    "is_palindrome": ("(s: str) -> bool", "Return True if s reads the same forwards and backwards, else False.",
                      "return s == s[::-1]", lambda n, s: s == s[::-1], _word, (0, 0)),
    "last_{n}_chars": ("(s: str) -> str", "Return the last {n} characters of s (all of s if it is shorter).",
                       "return s[-{n}:]", lambda n, s: s[-n:], _word, (1, 4)),
    "starts_with_{c}": ("(s: str) -> bool", "Return True if s starts with the letter '{c}', else False.",
                        "return s.startswith('{c}')", lambda c, s: s.startswith(c), _word, (0, 7)),
    # two steps in one line (a constant inside a filter, a clamp, a rewrite): the untrained
    # embedded model passes the one-step templates above most of the time, so these keep the
    # level's success inside the 10-60% band RL needs (docs/results/easy_levels.md)
    "clamp_0_{n}": ("(x: int) -> int", "Return x limited to the range 0..{n}: 0 if x is below 0, {n} if x is above {n}, else x.",
                    "return min(max(x, 0), {n})", lambda n, x: min(max(x, 0), n), _ints(-15, 25), (3, 12)),
    "count_above_{n}": ("(xs: list) -> int", "Return how many numbers in xs are greater than {n}.",
                        "return sum(1 for x in xs if x > {n})", lambda n, xs: sum(1 for x in xs if x > n),
                        _int_list, (-3, 5)),
    "add_{n}_to_each": ("(xs: list) -> list", "Return a new list with {n} added to every number of xs.",
                        "return [x + {n} for x in xs]", lambda n, xs: [x + n for x in xs], _int_list, (1, 9)),
    "remove_{c}": ("(s: str) -> str", "Return s with every letter '{c}' removed.",
                   "return s.replace('{c}', '')", lambda c, s: s.replace(c, ""), _word, (0, 7)),
    "sum_multiples_of_{n}": ("(xs: list) -> int", "Return the sum of the numbers in xs that are divisible by {n}.",
                             "return sum(x for x in xs if x % {n} == 0)", lambda n, xs: sum(x for x in xs if x % n == 0),
                             _int_list, (2, 5)),
    "last_is_{c}": ("(s: str) -> bool", "Return True if s is not empty and its last letter is '{c}', else False.",
                    "return s.endswith('{c}')", lambda c, s: s.endswith(c), _word, (0, 7)),
}
_LETTERS = "abcdeiou"
TESTS_PER_TASK = 4


def _task(template: str, n: int, rng: random.Random) -> dict[str, Any]:
    sig, doc, body, impl, sampler, _ = TEMPLATES[template]
    const = _LETTERS[n] if "{c}" in template else n
    fill = {"n": const, "c": const}
    name = template.format(**fill).replace("-", "neg")
    calls: list[tuple] = []
    for _ in range(40):  # distinct calls
        args = sampler(rng)
        if args not in calls:
            calls.append(args)
        if len(calls) == TESTS_PER_TASK + 1:
            break
    example, tests_args = calls[0], calls[1:]
    shown = ", ".join(repr(a) for a in example)
    docstring = f"{doc.format(**fill)}\n    >>> {name}({shown})\n    {impl(const, *example)!r}"
    starter = f'def {name}{sig}:\n    """{docstring}\n    """\n'
    tests = [f"assert {name}({', '.join(repr(a) for a in args)}) == {impl(const, *args)!r}"
             for args in tests_args]
    return {"source": "easy", "kind": "function", "template": template, "question": starter, "entry_point": name,
            "starter": starter, "reference": starter + f"    {body.format(**fill)}\n", "tests": tests}


TEST_CONSTANTS = 2  # per template with a constant: so no single template dominates the test split


def easy_rows(seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, test): every (template, constant) once, TEST_CONSTANTS of each template's constants
    in test; every third template without a constant goes wholly to test. The test rows are
    shuffled (seeded), so the first N problems (eval.limit=N) mix the templates."""
    rng = random.Random(f"code_easy/{seed}")
    train, test = [], []
    plain = 0
    for template, spec in TEMPLATES.items():
        lo, hi = spec[5]
        if "{" in template:
            consts = list(range(lo, hi + 1))
            rng.shuffle(consts)
            chosen = [(n, i < min(TEST_CONSTANTS, len(consts) // 2)) for i, n in enumerate(consts)]
        else:
            chosen = [(0, plain % 3 == 2)]
            plain += 1
        for n, in_test in chosen:
            split = test if in_test else train
            row = _task(template, n, rng)
            row["id"] = f"easy/{row['entry_point']}"
            split.append(row)
    rng.shuffle(test)
    return train, test


def build_easy(out_dir: str | Path, *, seed: int = 0) -> dict[str, Any]:
    out = new_output_dir(out_dir)  # never writes over a split that is already there
    train, test = easy_rows(seed)
    report: dict[str, Any] = {"seed": seed, "preset": "code_easy", "templates": len(TEMPLATES)}
    with Progress(f"building {out.name} (tests verified in the sandbox)", 2, "splits") as progress:
        for name, rows in (("train", train), ("test", test)):
            report[f"{name}_verify"] = verify_function_rows(rows)
            write_split(out / f"{name}.parquet", rows)
            report[name] = len(rows)
            progress.advance()
    return report
