#!/usr/bin/env python3
"""Regenerates common/chat/jinja_cases.inc: (template, expected) pairs whose
expected output is what Python jinja2 renders with HF transformers' chat
template environment (trim_blocks, lstrip_blocks, loopcontrols, HF tojson).

Usage: python3 common/chat/testdata/jinja_cases.py > common/chat/jinja_cases.inc
"""
import json
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

CONTEXT = {
    "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    "n": 3,
    "s": "Hello World",
    "d": {"b": 2, "a": 1},
    "none_v": None,
    "f": 2.5,
    "lst": [3, 1, 2],
    "uni": "naïve café — 日本語 🦙",
}

CASES = [
    # output, comments, whitespace control
    "plain text",
    "a{# comment #}b",
    "a {{- ' b ' -}} c",
    "a\n  {%- if true %} x {% endif -%}\n  b",
    "line1\n    {% if true %}\n    yes\n    {% endif %}\nline2",
    "{% if true %}\nA\n{% endif %}\nB",
    "  {#- c -#}  x",
    "x\n{# c #}\ny",
    "{%+ if true %}a{% endif +%}\nb",
    "{% raw %}{{ not }} {% evaluated %}{% endraw %}",
    "text with { braces } and %}",
    "trailing newline\n",
    # literals and printing
    "{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 1e3 }} {{ 10/4 }} {{ 7//2 }} {{ 2**10 }} {{ 1_000 }}",
    "{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}",
    "{{ 'single' }} {{ \"double\" }} {{ 'esc\\n\\t\\'q\\'' }} {{ 'a' 'b' }}",
    "{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }}",
    "{{ (1,) }} {{ (1, 2) }} {{ () }} {{ {} }} {{ [] }}",
    "{{ ['it\\'s', \"q\\\"\", 'x\\ny', '\\\\'] }}",
    "{{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 3.0 }}",
    "{{ uni }}",
    # operators
    "{{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ -7 // 2 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}",
    "{{ 2 ** 3 ** 2 }} {{ 2 ** -1 }} {{ -2 ** 2 }}",
    "{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }}",
    "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] + [2] }} {{ [0] * 3 }} {{ 'a' ~ 1 ~ none ~ true }}",
    "{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }} {{ 1 <= 0 }}",
    "{{ true == 1 }} {{ none == none }} {{ 'a' == 'a' }} {{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }} {{ 'x' == 1 }}",
    "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'a' in d }} {{ 'b' not in d }} {{ 'z' not in 'abc' }} {{ 1 in (1, 2) }}",
    "{{ true and 'x' }} {{ 0 and 'x' }} {{ '' or 'y' }} {{ 'z' or 'y' }} {{ not 0 }} {{ not 'a' }} {{ not not 1 }}",
    "{{ 'yes' if n > 2 else 'no' }} {{ 'yes' if n > 5 else 'no' }} [{{ 'only' if false }}]",
    "{{ 1 if true else 2 if true else 3 }} {{ (1 if false else 2) + 10 }}",
    "{{ -n }} {{ +n }} {{ -f }} {{ not n is none }}",
    "{{ n is not none }} {{ none_v is none }} {{ none_v is not none }}",
    # attribute / item access, slicing
    "{{ msgs[0].role }} {{ msgs[0]['content'] }} {{ msgs[-1].role }} {{ msgs.0.role }} [{{ msgs[5] }}] [{{ d.zzz }}]",
    "{{ s[0] }} {{ s[-1] }} {{ s[1:4] }} {{ s[::-1] }} {{ s[:3] }} {{ s[6:] }} {{ s[::2] }} {{ s[-5:-1] }} [{{ s[20] }}]",
    "{{ lst[::-1] }} {{ lst[1:] }} {{ lst[:-1] }} {{ lst[5:] }} {{ lst[-10:2] }} {{ lst[::-2] }} {{ msgs[::-1][0].role }}",
    "{{ uni[0] }} {{ uni[-1] }} {{ uni[1:5] }} {{ uni|length }} {{ uni[::-1] }}",
    "{{ d['a'] }} {{ d.b }} {{ d.get('a') }} {{ d.get('x', 9) }} [{{ d.get('x') }}] {{ d['items'] is defined }}",
    # tests
    "{{ x is defined }} {{ n is defined }} {{ x is undefined }} {{ none_v is defined }}",
    "{{ 's' is string }} {{ 1 is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }}",
    "{{ d is mapping }} {{ lst is mapping }} {{ lst is iterable }} {{ 's' is iterable }} {{ d is iterable }} {{ 1 is iterable }} {{ lst is sequence }} {{ 's' is sequence }}",
    "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ none_v is none }}",
    "{{ 2 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 'abc' is lower }} {{ 'ABC' is upper }}",
    "{{ 1 is eq 1 }} {{ 1 is equalto 1 }} {{ 2 is ne 1 }} {{ 1 is lt 2 }} {{ 2 is gt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 1 is in [1] }}",
    "{{ none_v is sameas none }} {{ true is sameas true }} {{ msgs is sameas msgs }}",
    "{{ range is callable }} {{ 1 is callable }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ 'nope' is filter }}",
    # if / elif / else
    "{% if n == 1 %}one{% elif n == 3 %}three{% else %}other{% endif %}",
    "{% if n == 1 %}one{% elif n == 2 %}two{% else %}other{% endif %}",
    "{% if x %}x{% elif none_v %}n{% endif %}|",
    # for loops
    "{% for m in msgs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}",
    "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }};{% endfor %}",
    "{% for x in [1, 2, 3] %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }};{% endfor %}",
    "{% for x in lst if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}",
    "{% for x in [] %}a{% else %}empty{% endfor %}",
    "{% for x in lst if x > 10 %}a{% else %}none passed{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }};{% endfor %}",
    "{% for c in 'abc' %}{{ c }}.{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }};{% endfor %}",
    "{% for x in lst %}{% if x == 1 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in lst %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in [1, 2] %}{% for y in 'ab' %}{{ x }}{{ y }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}",
    "{% for x in range(3) %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
    "{% for x in undefined_thing %}a{% else %}b{% endfor %}",
    "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }};{% endfor %}{{ x }}",
    "{% for i in [1, 2, 3] %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}",
    # set, namespace
    "{% set a = 1 %}{% set b, c = 2, 3 %}{{ a }}{{ b }}{{ c }}",
    "{% set t = (1, 2) %}{% set p, q = t %}{{ p }}{{ q }}",
    "{% set ns = namespace(count=0, items=[]) %}{% for m in msgs %}{% set ns.count = ns.count + 1 %}{% endfor %}{{ ns.count }}",
    "{% set ns = namespace(found=false) %}{% for m in msgs %}{% if m.role == 'assistant' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
    "{% set block %}inner {{ n }}{% endset %}[{{ block }}]",
    "{% set block | upper %}shout {{ n }}{% endset %}{{ block }}",
    "{% set d2 = dict(a=1, b='x') %}{{ d2 }} {{ dict(d2, c=3) }}",
    "{% set ns = namespace(d) %}{{ ns.a }}{{ ns.b }}",
    # macros, call
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', '?') }} {{ greet(punct='.', name='Cy') }}",
    "{% macro m(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}]{% endmacro %}{{ m(1) }}",
    "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}",
    "{% macro outer() %}<{{ caller() }}>{% endmacro %}{% call outer() %}inside {{ n }}{% endcall %}",
    "{% macro list_it(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) list_it([1, 2]) %}({{ x }}){% endcall %}",
    "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}",
    "{% macro m() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m('a')|upper }} {{ m('  b ')|trim }}",
    # filters
    "{{ '  pad  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ s|upper }}|{{ s|lower }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}",
    "{{ s|replace('o', '0') }} {{ s|replace('l', 'L', 2) }} {{ 'abc'|replace('', '-') }}",
    "{{ lst|join(', ') }} {{ msgs|map(attribute='role')|join('+') }} {{ [1, 2]|join }}",
    "{{ lst|length }} {{ s|length }} {{ d|length }} {{ lst|count }} {{ x|length }}",
    "{{ lst|first }} {{ lst|last }} {{ s|first }} {{ 'ab'|list }} {{ d|list }}",
    "{{ x|default('dflt') }} {{ none_v|default('dflt') }} {{ ''|default('dflt', true) }} {{ x|d('d2') }} {{ 0|default(5, boolean=true) }}",
    "{{ lst|sort }} {{ lst|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ msgs|sort(attribute='role')|map(attribute='role')|list }}",
    "{{ [1, 2, 1, 3, 2]|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ lst|reverse|list }} {{ s|reverse }}",
    "{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }} {{ d|items|list }}",
    "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 2, 3]|select('gt', 1)|list }}",
    "{{ msgs|selectattr('role', 'equalto', 'user')|list }} {{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='content')|list }} {{ msgs|selectattr('role')|list|length }}",
    "{{ ['a', 'b']|map('upper')|list }} {{ [1.7, 2.2]|map('int')|list }} {{ msgs|map(attribute='missing', default='?')|list }}",
    "{{ -3|abs }} {{ (-3)|abs }} {{ -2.5|abs }} {{ 3.7|int }} {{ '42'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '3.9'|int }} {{ '0x1A'|int(0, 16) }} {{ '3.5'|float }} {{ 'x'|float }} {{ 2|float }}",
    "{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 3.7|round(0, 'floor') }} {{ 3.2|round(0, 'ceil') }} {{ 2.675|round(2) }}",
    "{{ 5|string }}{{ none|string }}{{ [1]|string }} {{ 'x'|safe }} {{ '<a href=\"x\">&</a>'|escape }} {{ '<b>'|e }}",
    "{{ d|tojson }} {{ msgs|tojson }} {{ 'é\"\\n'|tojson }} {{ [1, 2.0, none, true]|tojson }} {{ 'é'|tojson(ensure_ascii=true) }}",
    "{{ {'a': [1, {'b': 2}], 'c': {}}|tojson(indent=2) }}",
    "{{ {'a': 1, 'b': [1, 2]}|tojson(separators=(',', ':')) }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}",
    "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}",
    "{{ 'hello world foo'|wordcount }} [{{ 'ab'|center(6) }}] [{{ 'abc'|center(6) }}]",
    "{{ lst|sum }} {{ msgs|map(attribute='content')|join|length }} {{ lst|min }} {{ lst|max }} {{ ['b', 'A']|max }}",
    "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }}",
    "{{ '%s-%d-%05.1f'|format('a', 3, 2.25) }} {{ '%s' % 'x' }} {{ '%d%%' % 50 }} {{ '%(k)s'|format(k='v') }}",
    "{{ s|attr('upper') is callable }} {{ msgs[0]|attr('role') }}",
    "{% filter upper %}shout {{ n }}{% endfilter %}",
    # str methods
    "{{ ' a b '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  hi '.lstrip() }}|{{ ' hi  '.rstrip() }}|{{ '\\n\\nx\\n'.strip('\\n') }}",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'x</think>y</think>z'.split('</think>')[-1] }}",
    "{{ s.startswith('Hell') }} {{ s.startswith(('x', 'H')) }} {{ s.endswith('ld') }} {{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }}",
    "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ s.find('o') }} {{ s.find('z') }} {{ s.rfind('o') }} {{ s.count('l') }} {{ uni.find('日') }}",
    "{{ '-'.join(['a', 'b']) }} {{ ', '.join(lst|map('string')) }} {{ 'ab12'.isalnum() }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ 'AB'.isupper() }} {{ 'ab'.islower() }}",
    "{{ '{} and {}'.format('x', 1) }} {{ '{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='N') }} {{ '{:>5}|{:<4}|{:^5}|{:.2f}|{:03d}'.format('r', 'l', 'c', 3.14159, 7) }}",
    "{{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4, '.') }} {{ 'ab'.rjust(4) }} {{ '42'.zfill(5) }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'Hello'.swapcase() }} {{ 'prefix-x'.removeprefix('prefix-') }} {{ 'x.txt'.removesuffix('.txt') }}",
    # dict / list methods
    "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}",
    "{{ [1, 2, 3].index(2) }} {{ [1, 1, 2].count(1) }}",
    # globals
    "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
    # comments and whitespace-heavy templates like real chat templates
    "{%- for m in msgs %}\n    {{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}\n{%- endfor %}\n{%- if true %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n",
    "{% for m in msgs %}\n  {% if loop.first %}\n    first: {{ m.role }}\n  {% else %}\n    other: {{ m.role }}\n  {% endif %}\n{% endfor %}\n",
]


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    print("// Generated by common/chat/testdata/jinja_cases.py from Python jinja2 "
          + jinja2.__version__ + "; do not edit.")
    print("// {template, expected output} with the context defined in jinja_test.cc.")
    for src in CASES:
        out = env.from_string(src).render(**CONTEXT)
        print("{%s,\n %s}," % (cpp(src), cpp(out)))


def cpp(s):
    b = s.encode("utf-8")
    return "R\"J(" + b.decode("utf-8") + ")J\"" if ")J\"" not in s else json.dumps(s)


if __name__ == "__main__":
    main()
