"""Answer extraction and math equivalence for the math env.

Correctness is judged by math-verify (parse + verify), behind two guards:

* a fast path: when both sides are plain numbers ("18", "-3.5", "1,000", "1/2",
  "\\frac{1}{2}") they are compared exactly as fractions, no sympy involved;
* a safety screen: math-verify's own timeouts use SIGALRM, which only works on the
  main thread, and the rollout steps envs in a thread pool. We therefore always call
  it with its timeouts off (identical results on any thread) and refuse, before
  parsing, answers that could make sympy hang: over-long strings, nested or huge
  powers (``9^{9^9}`` takes minutes), and factorials / binomials of big literals.
  A refused answer is simply "not equal" (zero reward), never an exception.

An exception inside math-verify / sympy also counts as "not equal", but not silently:
each kind is logged once (WARNING) and counted (`judge_counts()`, the trainer's
`judge/errors` metrics), so a judge that breaks on a whole dataset shows up.

Extraction (reward shaping, documented in the env): the last ``\\boxed{...}`` wins;
without one, and unless ``strict_boxed``, the last number in the text is the answer.
"""
from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from fractions import Fraction

from pettingllms.utils import counters

MAX_ANSWER_CHARS = 200  # longer "answers" are not answers; also bounds parser time
MAX_EXPONENT = 10_000  # |exponent| bound for literal powers (10^10000 is still cheap)
MAX_FACTORIAL_ARG = 1_000

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_PLAIN_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d*)?$")
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$|^(-?)\\[dt]?frac(\d)(\d)$")
_SLASH = re.compile(r"^(-?\d+)\s*/\s*(-?\d+)$")
_INT_LITERAL = re.compile(r"\d+")

# math-verify logs a warning the first time timeouts are disabled; we handle it here.
logging.getLogger("math_verify").setLevel(logging.ERROR)
log = logging.getLogger(__name__)

_errors: Counter = Counter()
_errors_lock = threading.Lock()


def judge_counts() -> dict[str, int]:
    """{"errors/<exception type>": n} since the process started."""
    with _errors_lock:
        return dict(_errors)


counters.register("judge", judge_counts)  # per-run metrics on Batch.counters


def _judge_error(e: Exception, gold: str, pred: str) -> None:
    kind = type(e).__name__
    with _errors_lock:
        _errors[f"errors/{kind}"] += 1
        first = _errors[f"errors/{kind}"] == 1
    if first:
        log.warning("math judge: math-verify raised %s (%s) on gold %r vs answer %r; counted "
                    "as not equal (metric judge/errors/%s); later %s errors are only counted",
                    kind, str(e)[:200], gold[:80], pred[:80], kind, kind)


def extract_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) in text, braces balanced."""
    if not isinstance(text, str):
        return None
    # One pass with a stack (a reply of 5,000 unclosed "\boxed{" must stay linear).
    opens = {m.end() - 1 for m in _BOXED.finditer(text)}  # index of each boxed's "{"
    if not opens:
        return None
    stack: list[tuple[int, bool]] = []  # (content start, is a boxed brace)
    found = None
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append((i + 1, i in opens))
        elif ch == "}" and stack:
            start, boxed = stack.pop()
            if boxed:
                found = text[start:i].strip()  # the boxed that closes last wins
    return found


def extract_final_number(text: str) -> str | None:
    """The last number in text ("1,234", "-3.5", "7/8"), commas removed."""
    if not isinstance(text, str):
        return None
    matches = _NUMBER.findall(text)
    if not matches:
        return None
    return matches[-1].replace(",", "").rstrip(".")


def extract_answer(text: str, strict_boxed: bool = False) -> str | None:
    """A reasoner's answer: last \\boxed{} content, else (unless strict) the last number."""
    boxed = extract_boxed(text)
    if boxed:
        return boxed
    if strict_boxed:
        return None
    return extract_final_number(text)


def _clean(s: str) -> str:
    s = s.strip().strip("$").strip()
    s = re.sub(r"\\(?:text|mathrm|textbf)\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\!", "").replace("\\,", "").replace("\\ ", "").replace("\\left", "").replace("\\right", "")
    s = s.replace("\\$", "").replace("dfrac", "frac").replace("tfrac", "frac")
    s = s.strip().rstrip(".").strip()
    return s[:-2] if s.endswith("\\%") else s.rstrip("%")


def as_number(s: str) -> Fraction | None:
    """Exact value of a plain number / simple fraction, else None (the fast path)."""
    s = _clean(s).replace(" ", "")
    if not s or len(s) > 60:
        return None
    try:
        if _PLAIN_NUMBER.match(s) and any(c.isdigit() for c in s):
            return Fraction(s.replace(",", ""))
        m = _SLASH.match(s)
        if m and int(m.group(2)) != 0:
            return Fraction(int(m.group(1)), int(m.group(2)))
        m = _FRAC.match(s)
        if m:
            sign, num, den = (m.group(1), m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5), m.group(6))
            if int(den) != 0:
                value = Fraction(int(num), int(den))
                return -value if sign else value
    except (ValueError, ZeroDivisionError):
        return None
    return None


def _exponent_spans(s: str) -> list[str]:
    """The exponent text after each ^ or ** (a {...} / (...) group or a token)."""
    spans = []
    for m in re.finditer(r"\^|\*\*", s):
        i = m.end()
        while i < len(s) and s[i] == " ":
            i += 1
        if i < len(s) and s[i] in "{(":
            open_, close = s[i], "}" if s[i] == "{" else ")"
            depth, j = 0, i
            while j < len(s):
                depth += (s[j] == open_) - (s[j] == close)
                j += 1
                if depth == 0:
                    break
            spans.append(s[i:j])
        else:
            t = re.match(r"-?[\w.]+", s[i:])
            spans.append(t.group(0) if t else "")
    return spans


def is_safe_to_parse(s: str) -> bool:
    """False for answers that could make sympy run for minutes (see module doc)."""
    if not isinstance(s, str) or len(s) > MAX_ANSWER_CHARS:
        return False
    for exp in _exponent_spans(s):
        if "^" in exp or "**" in exp or "!" in exp:
            return False  # towers: 9^{9^9}
        bound = 1
        for lit in _INT_LITERAL.findall(exp):
            bound *= max(1, int(lit))
            if bound > MAX_EXPONENT:
                return False
    big = "^" in s or "**" in s or any(int(x) > MAX_FACTORIAL_ARG for x in _INT_LITERAL.findall(s))
    if big and re.search(r"!|binom|choose|factorial|\bC\(|gamma", s):
        return False  # 100000!, \binom{10^6}{5*10^5}
    return True


def _parse(s: str):
    from math_verify import parse

    # Wrapping in \boxed{} makes math-verify read the whole string as one answer,
    # LaTeX or plain ("2^(n-1)", "\frac{\sqrt2}{2}", "x=3").
    return parse("\\boxed{" + s + "}", parsing_timeout=None)


def answers_equal(gold: str, pred: str) -> bool:
    """Is `pred` mathematically equal to `gold`? Never raises; thread-safe."""
    if not isinstance(gold, str) or not isinstance(pred, str):
        return False
    gold, pred = _clean(gold), _clean(pred)
    if not gold or not pred:
        return False
    g, p = as_number(gold), as_number(pred)
    if g is not None and p is not None:
        if g.denominator == 1 and p.denominator == 1:
            return g == p
        # printed floats (0.30000000000000004) and rounded decimals: math-verify's 6 digits
        return abs(g - p) <= Fraction(1, 10**6) * max(1, abs(g))
    if not (is_safe_to_parse(gold) and is_safe_to_parse(pred)):
        return False
    try:
        from math_verify import verify

        parsed_gold, parsed_pred = _parse(gold), _parse(pred)
        if not parsed_gold or not parsed_pred:
            return False
        return bool(verify(parsed_gold, parsed_pred, timeout_seconds=None))
    except Exception as e:  # noqa: BLE001 - math-verify / sympy internals on odd input
        _judge_error(e, gold, pred)
        return False


def is_correct(pred: str | None, gold: str) -> bool:
    return pred is not None and answers_equal(gold, pred)
