"""MATH scoring (``lighteval/MATH``, ``DigitalLearningGmbH/MATH-lighteval``, MATH-500).

The answer is the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in the response.
It is compared with the ground truth after the string normalisation of Hendrycks et al.
2021 ("Measuring Mathematical Problem Solving With the MATH Dataset"), which verl uses:
drop ``\\left``/``\\right``, degrees, dollars, units after ``\\text{ ``, ``\\%`` and
spaces; ``dfrac``/``tfrac`` -> ``frac``; ``\\frac12`` -> ``\\frac{1}{2}``; ``\\sqrt3`` ->
``\\sqrt{3}``; ``a/b`` -> ``\\frac{a}{b}``; ``0.5`` -> ``\\frac{1}{2}``; a leading ``x =``.

When the normalised strings differ and the optional ``math-verify`` package is installed,
it gets the last word (symbolic equivalence: ``\\frac{1}{2}`` == ``0.5`` == ``1/2``). verl
leaves that to the user; so with math-verify installed scores can only be higher.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def last_boxed_only_string(text: str) -> str | None:
    """The last ``\\boxed{...}``/``\\fbox{...}`` (braces balanced) or ``\\boxed x``, or None."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    if text.startswith("\\boxed ", start):
        return "\\boxed " + text[start + len("\\boxed ") :].split("$")[0]
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def remove_boxed(boxed: str) -> str | None:
    """``\\boxed{x}`` -> ``x`` (also ``\\fbox{x}`` and ``\\boxed x``); None if malformed."""
    for prefix in ("\\boxed ", "\\boxed{", "\\fbox{"):
        if boxed.startswith(prefix):
            inner = boxed[len(prefix) :]
            if prefix.endswith("{"):
                return inner[:-1] if inner.endswith("}") else None
            return inner
    return None


def _fix_fracs(text: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{2}`` -> ``\\frac{1}{2}``."""
    parts = text.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part.startswith("{") or len(part) < 2:
            out += part
            continue
        a, b, rest = part[0], part[1], part[2:]
        out += "{" + a + "}" + (b + rest if b == "{" else "{" + b + "}" + rest)
    return out


def _fix_a_slash_b(text: str) -> str:
    """``3/4`` -> ``\\frac{3}{4}`` when both sides are integers."""
    parts = text.split("/")
    if len(parts) != 2:
        return text
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return text
    return text if text != f"{a}/{b}" else f"\\frac{{{a}}}{{{b}}}"


def _fix_sqrt(text: str) -> str:
    """``\\sqrt3`` -> ``\\sqrt{3}``."""
    parts = text.split("\\sqrt")
    out = parts[0]
    for part in parts[1:]:
        if part and part[0] != "{":
            out += "\\sqrt{" + part[0] + "}" + part[1:]
        else:
            out += "\\sqrt" + part
    return out


def strip_string(text: str) -> str:
    """Hendrycks' MATH answer normalisation (see the module docstring)."""
    text = text.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "")
    text = text.replace("\\$", "")
    if "\\text{ " in text:  # units: "5 \\text{ cm}" -> "5 "
        text = text.split("\\text{ ")[0]
    text = text.replace("\\%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "x = 5" -> "5"
        text = sides[1]
    text = _fix_sqrt(text).replace(" ", "")
    text = _fix_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _fix_a_slash_b(text)


def _math_verify_equal(answer: str, ground_truth: str) -> bool:
    try:
        from math_verify import parse, verify
    except ImportError:
        return False
    try:
        return bool(verify(parse(f"\\boxed{{{ground_truth}}}"), parse(f"\\boxed{{{answer}}}")))
    except Exception as err:  # math-verify can raise on odd LaTeX: not equal then
        logger.debug("math-verify failed on %r vs %r: %s", answer, ground_truth, err)
        return False


def is_equiv(answer: str, ground_truth: str) -> bool:
    """Equal after normalisation, or (with math-verify installed) symbolically equal."""
    if strip_string(answer) == strip_string(ground_truth):
        return True
    return _math_verify_equal(answer, ground_truth)


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 if the last boxed answer is equivalent to ``ground_truth``, else 0.0."""
    boxed = last_boxed_only_string(solution_str)
    answer = remove_boxed(boxed) if boxed is not None else None
    if answer is None:
        return 0.0
    return 1.0 if is_equiv(answer, str(ground_truth)) else 0.0
