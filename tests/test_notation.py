"""One symbol per object: the notation page's symbols are not used with another meaning.

`book/notation.md` fixes one symbol per object for every page (issue 13). This test reads the maths
of every page in the table of contents (the chapters, the reference pages, the exercises and their
solutions) and flags the misuses that the course has actually had: a symbol from the notation page
written for another object (P for a permutation, M for the encoder memory, a bare d for a width,
m_h for ALiBi's slope, ...), and formulas in the column convention (W_Q x) that the page rules out.

Each rule names the symbol the page uses instead, and the test checks that the page lists it, so
the rules and the page cannot drift apart. Each rule is also run on an example that must be flagged,
so that none of them can silently stop matching.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

import book  # scripts/, on sys.path (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent
NOTATION = ROOT / "book" / "notation.md"


@dataclass(frozen=True)
class Rule:
    """A misuse: ``symbol`` (a regex over a formula, LaTeX commands kept) used in a sentence that
    matches ``context`` (a regex over the sentence's words; None: any sentence)."""

    name: str
    symbol: str
    instead: str  # what the notation page writes for this object (must appear on the page)
    example: str  # a sentence that the rule must flag
    context: str | None = None


RULES = [
    Rule("a bare d for a width", r"(?<![\\A-Za-z])d(?![A-Za-z_'])", "d_k",
         "Each pair turns at $\\theta_p = \\text{base}^{-2p/d}$ radians."),
    Rule("a projection applied to a column vector (vectors are rows)",
         r"W_\{?[QKVO]\}?(\^\{?\(h\)\}?)?\s*(x|q|k|h)(?![A-Za-z])", "Q = X W_Q",
         "The query is $q = W_Q x$."),
    Rule("^T for the transpose", r"\^\{?T\}?(?![A-Za-z])", "\\top", "The scores are $Q K^T$."),
    Rule("theta indexed by a position (i, j, m) instead of the pair p", r"\\theta_\{?[ijm]\b", "\\theta_p",
         "Pair $i$ turns at $\\theta_i$ per position."),
    Rule("m_h for ALiBi's slope (m is the online softmax's running maximum)", r"(?<![\\A-Za-z])m_\{?h\b", "\\beta_h",
         "The bias of head $h$ is $-m_h (i - j)$."),
    Rule("h with a subscript other than t (h is a head's index; h_t only a recurrent state)",
         r"(?<![\\A-Za-z])h_(?!t\b|\{t-1\})", "h",
         "Let $h_p = q_{[p]} \\overline{k_{[p]}}$."),
    Rule("P for a permutation", r"(?<![\\A-Za-z])P(?![A-Za-z])", "\\Pi",
         "Permuting the tokens by $P$ permutes the outputs.", context=r"permut"),
    Rule("M for the encoder memory", r"(?<![\\A-Za-z])M(?![A-Za-z])", "Z",
         "Cross-attention reads the encoder memory $M$.", context=r"\bmemory\b"),
    Rule("M for a bilinear form", r"(?<![\\A-Za-z])M(?![A-Za-z])", "G",
         "The bilinear form $M = W_Q W_K^\\top$.", context=r"bilinear"),
    Rule("V for the vocabulary (V is always the values)", r"(?<![\\A-Za-z{])V(?![A-Za-z])", "\\mathcal{V}",
         "A vocabulary of $V$ characters.", context=r"vocabulary"),
    Rule("T for the number of cached tokens (T is chapter 15's half-length)", r"(?<![\\A-Za-z])T(?![A-Za-z])",
         "T", "The cache holds the keys of the $T$ tokens before.", context=r"\bcache[sd]?\b"),
    Rule("F for the feed-forward width", r"(?<![\\A-Za-z])F(?![A-Za-z(])", "d_{ff}",
         "With a hidden width $F$ the weights are (F, D).", context=r"\bwidth\b"),
    Rule("b_q, b_k for the sizes of a tile (b is a sequence's index in the padding mask, b_q and b_k are biases; "
         "a tile is B_r queries by B_c keys)", r"(?<![\\A-Za-z])b_\{?[qkrc]\b", "B_r",
         "A tile holds $b_q$ queries.", context=r"\b(blocks?|tiles?)\b"),
    Rule("T for the temperature (T is chapter 15's half-length)", r"(?<![\\A-Za-z])T(?![A-Za-z])", "\\tau",
         "Divide the logits by $T$, the temperature.", context=r"\btemperatures?\b"),
    Rule("a bare b for a number of blocks (a tile is B_r queries by B_c keys; b indexes a sequence)",
         r"(?<![\\A-Za-z])b(?![A-Za-z_'])", "B_r",
         "The grid has $b^2$ tiles for as many blocks per side.", context=r"\bblocks per\b|\bnumber of blocks\b"),
    Rule("q_i · k_j (vectors are rows: the score of query i and key j is q_i k_j^T)",
         r"q_\{?i\}?\s*\\cdot\s*k_", "q_i k_j^\\top", "The score is $q_i \\cdot k_j / \\sqrt{d_k}$."),
]

#: Misuses in code: figure labels and variable names, which the reader sees as much as the maths.
CODE_RULES = [
    Rule("positions written m and n in a figure (the notation page: i for a query, j for a key)",
         r"""(?:label|title|suptitle|text)\w*\s*[=(][^\n]*["'][^"'\n]*(?:\bpositions?\s+\$?[mn]\b|\b[mn]\s*[-−]\s*[mn]\b)""",
         "query $i$", 'ax.set(xlabel="key position n", ylabel="query position m")'),
    Rule("V as a variable for the vocabulary size (V is always the values; the code writes vocab_size)",
         r"(?m)^\s*V\s*=\s*len\(", "vocab_size", "V = len(vocabulary)"),
]

# LaTeX whose argument is words, not symbols: \text{base}, \mathrm{softmax}, \operatorname{diag}.
_WORDS = re.compile(r"\\(?:text|mathrm|operatorname|textbf|mathbf|mathit)\{[^{}]*\}")
_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.S)
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def pages() -> list[Path]:
    """Every page of the site (scripts/book.py reads _toc.yml), as its notebook or MyST file."""
    return [next(p for p in (ROOT / f"{name}.ipynb", ROOT / f"{name}.md") if p.exists()) for name in book.pages()]


def markdown_of(path: Path) -> list[str]:
    if path.suffix == ".md":
        return [path.read_text()]
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]


def misuses(text: str, rules: list[Rule] = RULES) -> list[tuple[str, str, str]]:
    """(rule name, formula, sentence) for every formula in ``text`` that a rule flags."""
    text = _CODE.sub(" ", text)  # code spans are code, not notation
    found = []
    for match in _MATH.finditer(text):
        formula = _WORDS.sub(" ", match.group(1) or match.group(2))
        # The sentence around the formula: back to the previous full stop or blank line, on to the next.
        start = max(text.rfind(". ", 0, match.start()), text.rfind("\n\n", 0, match.start()), 0)
        ends = [e for e in (text.find(". ", match.end()), text.find("\n\n", match.end())) if e >= 0]
        sentence = _MATH.sub(" ", text[start:min(ends, default=len(text))])
        for rule in rules:
            if re.search(rule.symbol, formula) and (rule.context is None or re.search(rule.context, sentence, re.I)):
                found.append((rule.name, match.group(0).strip(), " ".join(sentence.split())[:160]))
    return found


def test_every_page_is_read() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in pages()}
    assert {"book/notation.md", "book/01_attention_from_scratch.ipynb", "exercises/11_rotary_embeddings.ipynb",
            "solutions/16_modern_block.ipynb"} <= names, sorted(names)
    assert sum(len(_MATH.findall("\n".join(markdown_of(p)))) for p in pages()) > 1000  # the maths is found


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_rule_flags_its_example_and_names_a_symbol_of_the_notation_page(rule: Rule) -> None:
    assert [name for name, _, _ in misuses(rule.example, [rule])] == [rule.name], rule.example
    assert rule.instead in NOTATION.read_text(), f"{rule.instead!r} is not on the notation page"


def code_misuses(code: str, rules: list[Rule] = CODE_RULES) -> list[tuple[str, str]]:
    """(rule name, line) for every line of ``code`` that a code rule flags."""
    return [(rule.name, match.group(0).strip()[:160]) for rule in rules for match in re.finditer(rule.symbol, code)]


@pytest.mark.parametrize("rule", CODE_RULES, ids=lambda rule: rule.name)
def test_code_rule_flags_its_example_and_names_a_symbol_of_the_notation_page(rule: Rule) -> None:
    assert [name for name, _ in code_misuses(rule.example, [rule])] == [rule.name], rule.example
    assert rule.instead in NOTATION.read_text(), f"{rule.instead!r} is not on the notation page"


def code_of(path: Path) -> str:
    if path.suffix == ".py":
        return path.read_text()
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")


CODE = [p for p in pages() if p.suffix == ".ipynb"] + sorted((ROOT / "lessons_src" / "figures").glob("*.py"))


@pytest.mark.parametrize("path", CODE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_code_uses_the_notation(path: Path) -> None:
    found = code_misuses(code_of(path))
    assert not found, "\n".join(f"{name}: {line}" for name, line in found)


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_uses_the_notation(path: Path) -> None:
    if path == NOTATION:
        pytest.skip("the notation page names the misuses it rules out")
    found = [hit for text in markdown_of(path) for hit in misuses(text)]
    assert not found, "\n".join(f"{name}: {formula} in “{sentence}”" for name, formula, sentence in found)
