"""Small Jinja2 templates covering the features chat templates use; jinja_oracle_setup.py renders
each with Jinja2 (configured as transformers does) and the C++ test requires identical output.

Each entry is (template, context). Contexts are JSON-compatible. Entries that Jinja2 rejects are
kept on purpose: the C++ side must reject them too.
"""

MSGS = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "yo", "reasoning_content": "think"},
    {"role": "user", "content": "<tool_response>\nx\n</tool_response>"},
]

SNIPPETS = [
    # --- printing Python values
    ("{{ true }}|{{ false }}|{{ none }}|{{ True }}|{{ None }}", {}),
    ("{{ 1 }}|{{ -3 }}|{{ 2.5 }}|{{ 1.0 }}|{{ 1e20 }}|{{ 1e-5 }}|{{ 0.0001 }}|{{ 123456789.123 }}", {}),
    ("{{ 1e16 }}|{{ 1e15 }}|{{ 0.1 + 0.2 }}|{{ 10 / 4 }}|{{ 10 / 5 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}", {}),
    ("{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 2.0 ** 3 }}|{{ 7.5 // 2 }}|{{ -7.5 % 2 }}|{{ true + 1 }}", {}),
    ("{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }}|{{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ {} }}|{{ [] }}", {}),
    ("{{ \"it's\" }}|{{ ['it\\'s', 'say \"hi\"', 'both \\' \"'] }}|{{ ['tab\\tnl\\n', 'é', '\\x01'] }}", {}),
    ("{{ x }}|{{ x|string }}|{{ x|list }}", {"x": [1, "two", None, True, 2.5]}),
    ("{{ d }}|{{ d|string }}", {"d": {"a": 1, "b": [None, False], "c": {"x": "y"}}}),
    ("[{{ missing }}]|{{ missing is defined }}|{{ missing|default('dflt') }}|{{ none|default('x') }}|{{ ''|default('e', true) }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ missing ~ [1] }}", {}),
    # --- strings, escapes, slicing, methods
    ("{{ 'a\\nb\\tc\\\\d\\'e\\\"f\\u00e9\\x41\\101' }}", {}),
    ("{{ 'abc'[::-1] }}|{{ 'héllo wörld'[1:4] }}|{{ 'héllo'[-1] }}|{{ 'abcdef'[::2] }}|{{ 'abcdef'[-2:] }}|{{ 'abc'[5:] }}|{{ 'abcdef'[4:1:-1] }}", {}),
    ("{{ s.startswith('He') }}|{{ s.endswith('!') }}|{{ s.startswith(('x', 'Hel')) }}|{{ s.lower() }}|{{ s.upper() }}|{{ s.title() }}|{{ s.capitalize() }}", {"s": "Hello wOrld it's ÉTÉ!"}),
    ("{{ s.split() }}|{{ s.split(',') }}|{{ s.split(',', 1) }}|{{ s.rsplit(',', 1) }}|{{ s.split(None, 1) }}|{{ s.rsplit(None, 1) }}", {"s": "  a,b ,, c d  "}),
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip('\\n') }}|{{ s.strip(' \\nx') }}", {"s": "\n x hello x \n"}),
    ("{{ s.replace('a', 'o') }}|{{ s.replace('a', 'o', 1) }}|{{ s.replace('', '-') }}|{{ s.find('n') }}|{{ s.rfind('n') }}|{{ s.count('a') }}|{{ s.find('zz') }}", {"s": "banana"}),
    ("{{ '-'.join(['a', 'b']) }}|{{ '{} and {}'.format(1, 'b') }}|{{ '{0}{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='N') }}|{{ '{:>5}|{:<4}|{:^6}|{:05.2f}|{:,}'.format('r', 'l', 'c', 3.14159, 1234567) }}", {}),
    ("{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'x'.zfill(3) }}|{{ '42'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ '  '.isspace() }}|{{ 'abc'.islower() }}|{{ 'ABC'.isupper() }}", {}),
    ("{{ s|trim }}|{{ s|trim('x ') }}|{{ s|length }}|{{ s|upper }}|{{ s|lower }}|{{ s|title }}|{{ s|capitalize }}|{{ s|wordcount }}", {"s": "  xhello-world (foo) bar_baz éa  "}),
    ("{{ s|replace('a', 'b') }}|{{ s|replace('a', 'b', 2) }}|{{ s|truncate(9) }}|{{ s|truncate(9, true) }}|{{ s|truncate(30) }}|{{ s|center(40) }}|", {"s": "a banana and a cat walk"}),
    ("{{ s|indent }}|{{ s|indent(2, true) }}|{{ s|indent('> ', blank=true) }}", {"s": "line1\n\nline3\n"}),
    ("{{ '%s-%d-%05.1f-%x-%r-%%' % ('a', 3, 2.25, 255, 'q') }}|{{ '%s'|format(5) }}|{{ '%(a)s'|format(a=1) }}|{{ '%s' % none }}", {}),
    ("{{ s|e }}|{{ s|escape }}|{{ s|safe }}", {"s": "<a href='x'>&\"</a>"}),
    ("{{ 'é'|length }}|{{ '😊'|length }}|{{ '😊abc'[1:] }}|{{ 'ßx'|upper }}", {}),
    # --- numbers and conversions
    ("{{ '42'|int }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 3.9|int }}|{{ '0x1f'|int(0, 16) }}|{{ ' 12 '|int }}|{{ true|int }}", {}),
    ("{{ '2.5'|float }}|{{ 'x'|float }}|{{ 3|float }}|{{ '1e3'|float }}|{{ -3|abs }}|{{ -2.5|abs }}", {}),
    ("{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 2.1|round(0, 'ceil') }}|{{ 2.9|round(0, 'floor') }}|{{ 7|round }}", {}),
    ("{{ [3, 1, 2]|sum }}|{{ [3, 1, 2]|max }}|{{ [3, 1, 2]|min }}|{{ ['b', 'A', 'c']|max }}|{{ ['b', 'A', 'c']|min }}|{{ []|max }}", {}),
    # --- containers and filters
    ("{{ [3, 1, 2]|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}", {}),
    ("{{ items|sort(attribute='n')|map(attribute='n')|list }}|{{ items|map(attribute='name')|join(', ') }}|{{ items|map(attribute='zz', default='d')|list }}", {"items": [{"n": 2, "name": "b"}, {"n": 1, "name": "a"}]}),
    ("{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}|{{ [0, 1, '', 'x']|select|list }}|{{ [1, 2, 3]|select('gt', 1)|list }}", {}),
    ("{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}|{{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }}|{{ msgs|selectattr('reasoning_content')|list|length }}", {"msgs": MSGS}),
    ("{{ [1, 2, 2, 'a', 'A']|unique|list }}|{{ [1, 2, 3]|first }}|{{ [1, 2, 3]|last }}|{{ 'abc'|first }}|{{ []|first }}|{{ [1, 2, 3]|reverse|list }}|{{ 'abc'|reverse }}", {}),
    ("{{ d|items|list }}|{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d.items() %}{{ k }}:{{ v }},{% endfor %}|{{ d.keys()|list }}|{{ d.values()|list }}", {"d": {"b": 1, "a": [2], "c": None}}),
    ("{{ d|dictsort }}|{{ d|dictsort(reverse=true) }}|{{ d|dictsort(by='value') }}|{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 5) }}|{{ d['b'] }}|{{ d.b }}", {"d": {"b": 1, "a": 3, "C": 2}}),
    ("{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2, 3]|batch(2, 'x')|list }}|{{ [1, 2] + [3] }}|{{ 'ab' * 3 }}|{{ [0] * 3 }}|{{ 1 in [1, 2] }}|{{ 'a' in 'cat' }}|{{ 'k' in {'k': 1} }}|{{ 3 not in [1] }}", {}),
    ("{{ x[0] }}|{{ x[-1] }}|{{ x[1:] }}|{{ x[:-1] }}|{{ x[::-1] }}|{{ x[5] }}|{{ x.0 }}|{{ x|length }}|{{ x|count }}", {"x": [10, 20, 30]}),
    ("{{ m.content }}|{{ m['content'] }}|{{ m.missing }}|{{ m.missing is defined }}|{{ m.tool_calls is not defined }}", {"m": {"content": "c"}}),
    ("{{ m.missing.deeper }}", {"m": {}}),
    ("{{ undefined_var.attr }}", {}),
    # --- tojson (HF)
    ("{{ d|tojson }}", {"d": {"z": 1, "a": "é😊<>&'\"\\\n\t\u0001\u007f", "n": None, "t": True, "f": 1.5, "e": 1e100, "l": [1, [2, {}]], "o": {}}}),
    ("{{ d|tojson(indent=2) }}|{{ d|tojson(indent=0) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(ensure_ascii=true) }}|{{ d|tojson(separators=(',', ':')) }}", {"d": {"b": [1, 2, []], "a": "日本😊", "c": {"x": None}}}),
    ("{{ 'str'|tojson }}|{{ 3|tojson }}|{{ none|tojson }}|{{ [1.0, 2.50, -0.0]|tojson }}|{{ (1, 2)|tojson }}|{{ true|tojson }}", {}),
    ("{{ missing|tojson }}", {}),
    # --- tests
    ("{{ 1 is integer }}{{ 1.0 is integer }}{{ true is integer }}{{ 1.5 is float }}{{ true is number }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is mapping }}{{ [] is sequence }}{{ 'a' is sequence }}{{ {} is sequence }}{{ 1 is sequence }}", {}),
    ("{{ none is none }}{{ 0 is none }}{{ true is boolean }}{{ 1 is boolean }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 'x' is iterable }}{{ 3 is iterable }}{{ x is undefined }}", {}),
    ("{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 2 is eq 2 }}{{ 2 is ne 2 }}{{ 1 is lt 2 }}{{ 3 is ge 3 }}{{ 'a' is in 'cat' }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ none is sameas none }}", {}),
    ("{{ 'upper' is filter }}{{ 'nope' is filter }}{{ 'odd' is test }}{{ range is callable }}{{ 'a' is callable }}{{ x is not none and x is string }}", {"x": "s"}),
    # --- control flow, scoping
    ("{% for i in range(3) %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}", {}),
    ("{% for x in ['a', 'b', 'c'] %}[{{ loop.previtem }}|{{ x }}|{{ loop.nextitem }}]{% endfor %}|{% for x in 'xy' %}{{ loop.cycle('odd', 'even') }}{% endfor %}", {}),
    ("{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}|{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for i in range(3) %}{% if i == 0 %}{% set x = 5 %}{% endif %}[{{ x }}]{% endfor %}{{ x }}", {}),
    ("{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set y = 3 %}{% endif %}{{ y }}", {}),
    ("{% set ns = namespace(found=false, n=0) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }} {{ ns.missing }}", {"msgs": MSGS}),
    ("{% set ns = namespace(last=-1) %}{% for m in msgs[::-1] %}{% set idx = (msgs|length - 1) - loop.index0 %}{% if ns.last < 0 and m.role == 'user' and not m.content.startswith('<tool_response>') %}{% set ns.last = idx %}{% endif %}{% endfor %}{{ ns.last }}", {"msgs": MSGS}),
    ("{% for m in msgs %}{% for k in m %}{{ k }},{% endfor %};{% endfor %}", {"msgs": MSGS}),
    ("{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}|{% set a, b = 'xy' %}{{ b }}{{ a }}|{% set t = (1, 'two') %}{{ t[1] }}", {}),
    ("{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{{ j }}-{% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("{% if a %}A{% elif b %}B{% else %}C{% endif %}|{{ 'y' if a else 'n' }}|{{ 'only' if a }}|{{ a or 'dflt' }}|{{ a and 'never' }}|{{ b and 'yes' }}|{{ not a }}", {"a": "", "b": [1]}),
    ("{{ 1 < 2 < 3 }}|{{ 1 < 3 < 2 }}|{{ 1 == 1.0 }}|{{ 'a' < 'b' }}|{{ [1, 2] < [1, 3] }}|{{ (1, 2) == [1, 2] }}|{{ {'a': 1} == {'a': 1} }}|{{ none == none }}|{{ 1 != 2 }}", {}),
    ("{{ -1|abs }}|{{ -x|abs }}|{{ x * 2 + 1 }}|{{ (x + 1) * 2 }}|{{ -2 ** 2 }}|{{ 2 ** 3 ** 2 }}|{{ 10 - 2 - 3 }}|{{ 'n=' ~ x + 1 }}", {"x": 4}),
    # --- macros, set blocks, filter blocks, with
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }}|{{ greet('B', '?') }}|{{ greet(punct='.', name='C') }}|{{ greet() }}", {}),
    ("{% macro render(c) %}{% if c is string %}{{ c }}{% else %}{% for p in c %}{{ p.text }}{% endfor %}{% endif %}{% endmacro %}{{ render('s') }}|{{ render([{'text': 'a'}, {'text': 'b'}]) }}|{% set r = render('x')|trim %}{{ r }}", {}),
    ("{% macro m() %}{{ outer }}{% endmacro %}{% set outer = 'late' %}{{ m() }}", {}),
    ("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("{% set block %}  inner {{ 1 + 1 }}  {% endset %}[{{ block }}]|{% set up | upper %}shout{% endset %}{{ up }}|{% filter upper %}abc{{ 'd' }}{% endfilter %}|{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    ("{% set d = dict(a=1, b='x') %}{{ d }}|{{ dict(d, c=3) }}|{{ namespace(d).a }}|{% set j = joiner('/') %}{% for i in range(3) %}{{ j() }}{{ i }}{% endfor %}", {}),
    ("{{ range(5)|list }}|{{ range(2, 8, 3)|list }}|{{ range(5, 0, -2)|list }}|{{ range(0)|list }}", {}),
    # --- whitespace control (trim_blocks / lstrip_blocks / - / +)
    ("a\n  {% if true %}\n    b\n  {% endif %}\nc\n", {}),
    ("a\n  {%- if true -%}\n    b\n  {%- endif -%}\nc", {}),
    ("  {{ 'x' }}  \n  {# comment #}\n  y\n{#- trimmed -#}   z", {}),
    ("a  {%+ if true %}b{% endif +%}\nc\n  {% raw %}{{ not evaluated }}{% endraw %}\n", {}),
    ("{% for i in range(2) %}\n  line {{ i }}\n{% endfor %}\n", {}),
    ("x {% if true %} y {% endif %} z\n\n", {}),
    ("line1\r\nline2\r{{ 'v' }}\r\n", {}),
    ("{{- ' a ' -}}   {{- ' b ' }}  {{ ' c ' -}}  \n end", {}),
    ("\t{% set x = 1 %}\t\n {%- set y = 2 %}\n{{ x }}{{ y }}", {}),
    ("{% if true %}{{ {'a': {'b': 1}} }}{% endif %}", {}),
    # --- errors Jinja2 raises (the C++ side must raise too)
    ("{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    ("{% if not messages %}{{ raise_exception('No messages provided.') }}{% endif %}ok", {"messages": []}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ none + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ [1, 2].append(3) }}", {}),
    ("{% for %}", {}),
    ("{% if x %}unterminated", {}),
    ("{{ x | nosuchfilter }}", {"x": 1}),
    ("{% include 'other.jinja' %}", {}),
    ("{{ range(1000000)|length }}", {}),
    ("{% set x = 1 %}{% set x.y = 2 %}", {}),
    ("{{ 'x' is nosuchtest }}", {}),
    ("{{ 1 < 'a' }}", {}),
    ("{{ 'a' in 1 }}", {}),
    ("{{ m.a.b.c }}", {"m": {"a": None}}),
    ("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", {}),
]


# --- Seeded random corpora (deterministic: Python's random is stable for a fixed seed) ---------

_WS = [" ", "  ", "\n", "\t", " \n", "\n\n", "  \n  ", "\u00a0", "\u3000", "\r\n", "\r", "",
       "\n   ", "\t\n"]


def _whitespace_template(rng, depth=0):
    def sign():
        return rng.choice(["", "", "-", "+"])

    def atom():
        return rng.choice([
            "{{" + rng.choice(["", "-"]) + " 'x' " + rng.choice(["", "-"]) + "}}", "T",
            "{#" + sign() + " c " + sign() + "#}", "{%" + sign() + " set q = 1 " + sign() + "%}",
            "{%" + sign() + " raw " + sign() + "%} r {%" + sign() + " endraw " + sign() + "%}"])

    def block(body):
        a, b, c, d = sign(), sign(), sign(), sign()
        kind = rng.choice(["if", "for", "set", "macro"])
        if kind == "if":
            return ("{%" + a + " if x " + b + "%}" + body + "{%" + c + " else " + d + "%}" +
                    _whitespace_template(rng, 3) + "{%" + a + " endif " + c + "%}")
        if kind == "for":
            return "{%" + a + " for i in [1, 2] " + b + "%}" + body + "{%" + c + " endfor " + d + "%}"
        if kind == "set":
            return "{%" + a + " set v " + b + "%}" + body + "{%" + c + " endset " + d + "%}{{ v }}"
        return "{%" + a + " macro m() " + b + "%}" + body + "{%" + c + " endmacro " + d + "%}{{ m() }}"

    parts = []
    for _ in range(rng.randint(1, 5)):
        parts.append(rng.choice(_WS))
        parts.append(block(_whitespace_template(rng, depth + 1)) if depth < 3 and rng.random() < 0.3
                     else atom())
    parts.append(rng.choice(_WS))
    return "".join(parts)


_ATOMS = ["1", "0", "-2", "2.5", "0.1", "1e3", '"ab"', "'é😊'", '""', "none", "true", "false",
          "x", "y", "s", "l", "d", "missing", "[1, 2]", '(3, "t")', '{"k": 1}', "l[0]", "l[-1]",
          "d.k", 'd["k"]', "s[1:]", "s[::-1]", "l[1:2]"]
_OPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in",
        "not in"]
_FILTERS = ["|length", "|string", "|list", "|first", "|last", "|trim", "|upper", "|lower",
            "|tojson", "|int", "|float", "|abs", '|join(",")', '|default("D")', "|reverse|list",
            "|sort|list", "|unique|list", "|sum", "|max", "|min", "|items|list", "|dictsort",
            "|count", "|title", "|capitalize", "|round", '|selectattr("k")|list',
            '|map("string")|list', "|select|list"]
_TESTS = [" is defined", " is none", " is string", " is number", " is integer", " is float",
          " is mapping", " is sequence", " is iterable", " is odd", " is even", " is true",
          " is false", " is not none", " is boolean"]
EXPR_CONTEXT = {"x": 3, "y": -1.5, "s": "Hello World", "l": [3, 1, 2],
                "d": {"k": "v", "a": [1, {"b": None}]}}


def _expression(rng, depth=0):
    r = rng.random()
    if depth > 3 or r < 0.3:
        return rng.choice(_ATOMS)
    if r < 0.55:
        return "(" + _expression(rng, depth + 1) + " " + rng.choice(_OPS) + " " + \
            _expression(rng, depth + 1) + ")"
    if r < 0.7:
        return _expression(rng, depth + 1) + rng.choice(_FILTERS)
    if r < 0.8:
        return "(" + _expression(rng, depth + 1) + rng.choice(_TESTS) + ")"
    if r < 0.88:
        return "(not " + _expression(rng, depth + 1) + ")"
    if r < 0.94:
        return "(" + _expression(rng, depth + 1) + " if " + _expression(rng, depth + 1) + \
            " else " + _expression(rng, depth + 1) + ")"
    return "[" + _expression(rng, depth + 1) + ", " + _expression(rng, depth + 1) + "]"


def random_snippets(seed, n_whitespace, n_expressions):
    """Random whitespace-control templates and random expressions (seeded)."""
    import random
    rng = random.Random(seed)
    out = [(_whitespace_template(rng), {"x": rng.choice([True, False])})
           for _ in range(n_whitespace)]
    out += [("{{ " + _expression(rng) + " }}", EXPR_CONTEXT) for _ in range(n_expressions)]
    return out
