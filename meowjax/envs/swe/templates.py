"""The library of correct little functions and classes that code-repair tasks are built from.

Each :class:`Template` is one top-level function or class (``source``) living in a named module,
plus a few independent test cases (``tests``: case name -> body of a plain ``assert``-based test
function). A task picks a few templates per module, writes ``<module>.py`` and
``tests/test_<module>.py``, then plants a bug with :mod:`meowjax.envs.swe.mutate`. Tests are
written so that typical mutations (operator, comparison, off-by-one, swapped arguments, missing
branch) break some cases but not all of them.
"""

from __future__ import annotations

import dataclasses
import textwrap


@dataclasses.dataclass(frozen=True)
class Template:
    """One correct top-level definition and its test cases.

    module: file stem the definition lives in ("strutil" -> strutil.py, tests/test_strutil.py).
    name: the function/class name (tests import it by this name).
    source: Python source of the definition (any formatting; canonicalized by ``ast.unparse``).
    tests: case name -> body of ``def test_<name>_<case>():`` (plain asserts, stdlib only).
    """

    module: str
    name: str
    source: str
    tests: dict[str, str]


def _t(module: str, name: str, source: str, **tests: str) -> Template:
    return Template(module, name, textwrap.dedent(source).strip() + "\n",
                    {k: textwrap.dedent(v).strip() for k, v in tests.items()})


_RAISES = """
try:
    {call}
except {exc}:
    return
raise AssertionError('{call} should raise {exc}')
"""


def _raises(call: str, exc: str = "ValueError") -> str:
    return _RAISES.format(call=call, exc=exc)


TEMPLATES: tuple[Template, ...] = (
    # ---------------------------------------------------------------- strutil
    _t("strutil", "reverse_words", '''
        def reverse_words(text):
            """Returns the words of text in reverse order, joined by single spaces."""
            return " ".join(reversed(text.split()))
        ''',
       basic="assert reverse_words('a b c') == 'c b a'",
       single="assert reverse_words('hello') == 'hello'",
       spaces="assert reverse_words('  x   y ') == 'y x'"),
    _t("strutil", "count_vowels", '''
        def count_vowels(text):
            """Counts the vowels a, e, i, o, u in text, ignoring case."""
            return sum(1 for ch in text.lower() if ch in "aeiou")
        ''',
       basic="assert count_vowels('hello') == 2",
       upper="assert count_vowels('AEIOU') == 5",
       none="assert count_vowels('xyz') == 0"),
    _t("strutil", "is_palindrome", '''
        def is_palindrome(text):
            """True if text reads the same backwards, ignoring case and non-alphanumerics."""
            cleaned = [ch.lower() for ch in text if ch.isalnum()]
            return cleaned == cleaned[::-1]
        ''',
       word="assert is_palindrome('Racecar')",
       phrase="assert is_palindrome('A man, a plan, a canal: Panama')",
       no="assert not is_palindrome('hello')"),
    _t("strutil", "truncate", '''
        def truncate(text, width):
            """Shortens text to at most width characters, ending in '...' when cut."""
            if len(text) <= width:
                return text
            return text[:width - 3] + "..."
        ''',
       short="assert truncate('abc', 5) == 'abc'",
       exact="assert truncate('abcde', 5) == 'abcde'",
       long="assert truncate('abcdefgh', 6) == 'abc...'"),
    _t("strutil", "pad_left", '''
        def pad_left(text, width, fill=" "):
            """Left-pads text with fill up to width characters (never shortens)."""
            if len(text) >= width:
                return text
            return fill * (width - len(text)) + text
        ''',
       zeros="assert pad_left('7', 3, '0') == '007'",
       longer="assert pad_left('1234', 3) == '1234'",
       exact="assert pad_left('ab', 2) == 'ab'",
       default="assert pad_left('a', 3) == '  a'"),
    _t("strutil", "snake_to_camel", '''
        def snake_to_camel(name):
            """Converts snake_case to camelCase."""
            parts = name.split("_")
            return parts[0] + "".join(p.capitalize() for p in parts[1:])
        ''',
       two="assert snake_to_camel('hello_world') == 'helloWorld'",
       one="assert snake_to_camel('x') == 'x'",
       three="assert snake_to_camel('a_b_c') == 'aBC'"),
    _t("strutil", "count_char", '''
        def count_char(text, ch):
            """Counts how often the character ch occurs in text."""
            count = 0
            for c in text:
                if c == ch:
                    count += 1
            return count
        ''',
       many="assert count_char('banana', 'a') == 3",
       empty="assert count_char('', 'a') == 0",
       absent="assert count_char('aaa', 'b') == 0"),
    _t("strutil", "initials", '''
        def initials(name):
            """Upper-case first letters of the words of name, e.g. 'ada lovelace' -> 'AL'."""
            return "".join(part[0].upper() for part in name.split() if part)
        ''',
       two="assert initials('ada lovelace') == 'AL'",
       three="assert initials('Grace Brewster Hopper') == 'GBH'",
       empty="assert initials('') == ''"),
    _t("strutil", "repeat_join", '''
        def repeat_join(word, times, sep):
            """word repeated times times, separated by sep; '' when times <= 0."""
            if times <= 0:
                return ""
            return sep.join([word] * times)
        ''',
       three="assert repeat_join('ab', 3, '-') == 'ab-ab-ab'",
       zero="assert repeat_join('x', 0, ',') == ''",
       one="assert repeat_join('x', 1, ',') == 'x'"),
    # ---------------------------------------------------------------- mathops
    _t("mathops", "clamp", '''
        def clamp(x, lo, hi):
            """Returns x limited to the closed interval [lo, hi]."""
            if x < lo:
                return lo
            if x > hi:
                return hi
            return x
        ''',
       low="assert clamp(-5, 0, 10) == 0",
       high="assert clamp(15, 0, 10) == 10",
       inside="assert clamp(4, 0, 10) == 4",
       edges="assert clamp(0, 0, 10) == 0\nassert clamp(10, 0, 10) == 10"),
    _t("mathops", "gcd", '''
        def gcd(a, b):
            """Greatest common divisor of two non-negative integers (Euclid)."""
            if b == 0:
                return a
            return gcd(b, a % b)
        ''',
       common="assert gcd(12, 18) == 6",
       coprime="assert gcd(7, 5) == 1",
       zero="assert gcd(9, 0) == 9"),
    _t("mathops", "factorial", '''
        def factorial(n):
            """n! for n >= 0."""
            result = 1
            for k in range(2, n + 1):
                result *= k
            return result
        ''',
       zero="assert factorial(0) == 1",
       five="assert factorial(5) == 120",
       three="assert factorial(3) == 6"),
    _t("mathops", "is_prime", '''
        def is_prime(n):
            """True if n is a prime number."""
            if n < 2:
                return False
            for d in range(2, int(n ** 0.5) + 1):
                if n % d == 0:
                    return False
            return True
        ''',
       small="assert is_prime(2)\nassert is_prime(3)",
       composite="assert not is_prime(9)\nassert not is_prime(15)",
       edge="assert not is_prime(1)\nassert not is_prime(0)",
       big="assert is_prime(97)"),
    _t("mathops", "sum_range", '''
        def sum_range(lo, hi):
            """Sum of the integers lo, lo + 1, ..., hi (0 when hi < lo)."""
            return sum(range(lo, hi + 1))
        ''',
       four="assert sum_range(1, 4) == 10",
       single="assert sum_range(3, 3) == 3",
       empty="assert sum_range(5, 4) == 0"),
    _t("mathops", "mean", '''
        def mean(values):
            """Arithmetic mean; ValueError for an empty list."""
            if not values:
                raise ValueError("mean of empty list")
            return sum(values) / len(values)
        ''',
       three="assert mean([1, 2, 3]) == 2",
       one="assert mean([5]) == 5",
       empty=_raises("mean([])")),
    _t("mathops", "sign", '''
        def sign(x):
            """1 for positive x, -1 for negative x, 0 for zero."""
            if x > 0:
                return 1
            if x < 0:
                return -1
            return 0
        ''',
       positive="assert sign(5) == 1",
       negative="assert sign(-3) == -1",
       zero="assert sign(0) == 0"),
    _t("mathops", "digit_sum", '''
        def digit_sum(n):
            """Sum of the decimal digits of abs(n)."""
            total = 0
            for ch in str(abs(n)):
                total += int(ch)
            return total
        ''',
       positive="assert digit_sum(123) == 6",
       negative="assert digit_sum(-45) == 9",
       zero="assert digit_sum(0) == 0"),
    _t("mathops", "percent", '''
        def percent(part, whole):
            """100 * part / whole rounded to 1 decimal; 0.0 when whole is 0."""
            if whole == 0:
                return 0.0
            return round(100 * part / whole, 1)
        ''',
       quarter="assert percent(1, 4) == 25.0",
       third="assert percent(1, 3) == 33.3",
       zero="assert percent(5, 0) == 0.0"),
    # ---------------------------------------------------------------- listops
    _t("listops", "chunk", '''
        def chunk(items, size):
            """Splits items into consecutive lists of length size (the last may be shorter)."""
            return [items[i:i + size] for i in range(0, len(items), size)]
        ''',
       uneven="assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]",
       empty="assert chunk([], 3) == []",
       big="assert chunk([1, 2], 5) == [[1, 2]]"),
    _t("listops", "running_sum", '''
        def running_sum(values):
            """Prefix sums: [v0, v0 + v1, v0 + v1 + v2, ...]."""
            total = 0
            out = []
            for v in values:
                total += v
                out.append(total)
            return out
        ''',
       three="assert running_sum([1, 2, 3]) == [1, 3, 6]",
       empty="assert running_sum([]) == []",
       cancel="assert running_sum([5, -5]) == [5, 0]"),
    _t("listops", "max_index", '''
        def max_index(values):
            """Index of the largest value (the first one on ties)."""
            best = 0
            for i in range(1, len(values)):
                if values[i] > values[best]:
                    best = i
            return best
        ''',
       middle="assert max_index([3, 9, 2]) == 1",
       single="assert max_index([7]) == 0",
       ties="assert max_index([1, 5, 5]) == 1",
       first="assert max_index([9, 1, 2]) == 0"),
    _t("listops", "dedupe", '''
        def dedupe(items):
            """Drops repeated items, keeping the first occurrence and the order."""
            seen = set()
            out = []
            for x in items:
                if x not in seen:
                    seen.add(x)
                    out.append(x)
            return out
        ''',
       numbers="assert dedupe([1, 2, 1, 3, 2]) == [1, 2, 3]",
       empty="assert dedupe([]) == []",
       strings="assert dedupe(['a', 'a']) == ['a']"),
    _t("listops", "rotate", '''
        def rotate(items, k):
            """Rotates items left by k places (negative k rotates right)."""
            if not items:
                return []
            k = k % len(items)
            return items[k:] + items[:k]
        ''',
       one="assert rotate([1, 2, 3, 4], 1) == [2, 3, 4, 1]",
       full="assert rotate([1, 2, 3], 3) == [1, 2, 3]",
       empty="assert rotate([], 2) == []",
       negative="assert rotate([1, 2, 3], -1) == [3, 1, 2]"),
    _t("listops", "pairwise_diff", '''
        def pairwise_diff(values):
            """Differences of neighbours: [v1 - v0, v2 - v1, ...]."""
            return [values[i + 1] - values[i] for i in range(len(values) - 1)]
        ''',
       squares="assert pairwise_diff([1, 4, 9]) == [3, 5]",
       single="assert pairwise_diff([5]) == []",
       down="assert pairwise_diff([3, 1]) == [-2]"),
    _t("listops", "second_largest", '''
        def second_largest(values):
            """Second largest distinct value, or None if there is none."""
            unique = sorted(set(values))
            if len(unique) < 2:
                return None
            return unique[-2]
        ''',
       mixed="assert second_largest([3, 1, 4, 1, 5]) == 4",
       same="assert second_largest([2, 2]) is None",
       two="assert second_largest([10, 20]) == 10"),
    _t("listops", "count_greater", '''
        def count_greater(values, threshold):
            """How many values are strictly greater than threshold."""
            return len([v for v in values if v > threshold])
        ''',
       some="assert count_greater([1, 5, 7], 4) == 2",
       empty="assert count_greater([], 0) == 0",
       equal="assert count_greater([3, 3], 3) == 0"),
    _t("listops", "take", '''
        def take(items, n):
            """The first n items ([] when n <= 0)."""
            if n <= 0:
                return []
            return items[:n]
        ''',
       two="assert take([1, 2, 3], 2) == [1, 2]",
       zero="assert take([1], 0) == []",
       more="assert take([1, 2], 5) == [1, 2]"),
    # ---------------------------------------------------------------- shapes (small classes)
    _t("shapes", "Stack", '''
        class Stack:
            """Last-in first-out stack."""

            def __init__(self):
                self._items = []

            def push(self, x):
                self._items.append(x)

            def pop(self):
                if not self._items:
                    raise IndexError("pop from empty stack")
                return self._items.pop()

            def peek(self):
                return self._items[-1]

            def size(self):
                return len(self._items)
        ''',
       lifo="s = Stack()\ns.push(1)\ns.push(2)\nassert s.pop() == 2\nassert s.pop() == 1",
       size="s = Stack()\ns.push('a')\ns.push('b')\nassert s.size() == 2",
       peek="s = Stack()\ns.push(1)\ns.push(3)\nassert s.peek() == 3\nassert s.size() == 2",
       empty=_raises("Stack().pop()", "IndexError")),
    _t("shapes", "Tally", '''
        class Tally:
            """Counts occurrences of keys."""

            def __init__(self):
                self.counts = {}

            def add(self, key, n=1):
                self.counts[key] = self.counts.get(key, 0) + n

            def get(self, key):
                return self.counts.get(key, 0)

            def most_common(self):
                if not self.counts:
                    return None
                return max(self.counts, key=self.counts.get)
        ''',
       add="t = Tally()\nt.add('a')\nt.add('a')\nt.add('b', 3)\n"
           "assert t.get('a') == 2\nassert t.get('b') == 3",
       missing="assert Tally().get('zzz') == 0",
       common="t = Tally()\nt.add('x', 2)\nt.add('y', 5)\nassert t.most_common() == 'y'",
       empty="assert Tally().most_common() is None"),
    _t("shapes", "BankAccount", '''
        class BankAccount:
            """A balance that refuses non-positive deposits and overdrafts."""

            def __init__(self, balance=0):
                self.balance = balance

            def deposit(self, amount):
                if amount <= 0:
                    raise ValueError("deposit must be positive")
                self.balance += amount
                return self.balance

            def withdraw(self, amount):
                if amount > self.balance:
                    raise ValueError("insufficient funds")
                self.balance -= amount
                return self.balance
        ''',
       deposit="a = BankAccount(10)\nassert a.deposit(5) == 15",
       withdraw="a = BankAccount(10)\nassert a.withdraw(4) == 6\nassert a.withdraw(6) == 0",
       overdraft=_raises("BankAccount(3).withdraw(5)"),
       bad_deposit=_raises("BankAccount().deposit(0)")),
    _t("shapes", "Rect", '''
        class Rect:
            """An axis-aligned rectangle with a corner at the origin."""

            def __init__(self, width, height):
                self.width = width
                self.height = height

            def area(self):
                return self.width * self.height

            def perimeter(self):
                return 2 * (self.width + self.height)

            def contains(self, x, y):
                return 0 <= x <= self.width and 0 <= y <= self.height
        ''',
       area="assert Rect(3, 4).area() == 12",
       perimeter="assert Rect(3, 4).perimeter() == 14",
       inside="assert Rect(3, 4).contains(1, 2)\nassert Rect(3, 4).contains(3, 4)",
       outside="assert not Rect(3, 4).contains(4, 1)\nassert not Rect(3, 4).contains(1, -1)"),
)

MODULES: tuple[str, ...] = tuple(dict.fromkeys(t.module for t in TEMPLATES))


def templates_of(module: str) -> list[Template]:
    """The templates that live in ``module`` (in library order)."""
    return [t for t in TEMPLATES if t.module == module]


def case_id(template: Template, case: str) -> str:
    """The runner/pytest id of one case, e.g. 'tests/test_mathops.py::test_clamp_high'."""
    return f"tests/test_{template.module}.py::test_{template.name.lower()}_{case}"


def module_source(module: str, chosen: list[Template]) -> str:
    """Source text of ``<module>.py`` holding the chosen definitions (not yet canonicalized)."""
    body = "\n\n".join(t.source for t in chosen)
    return f'"""{module}: small helpers."""\n\n{body}'


def render_tests(module: str, chosen: list[Template]) -> str:
    """Source text of ``tests/test_<module>.py``: one function per case, plain asserts."""
    names = ", ".join(t.name for t in chosen)
    parts = [f'"""Tests for {module}.py."""\nfrom {module} import {names}\n']
    for t in chosen:
        for case, body in t.tests.items():
            parts.append(f"def test_{t.name.lower()}_{case}():\n" + textwrap.indent(body, "    "))
    return "\n\n".join(parts) + "\n"
