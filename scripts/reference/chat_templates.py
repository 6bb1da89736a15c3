"""Reference fixtures for chat templates, rendered by transformers: tests/data/chat_templates/.

Regenerate with `scripts/make-reference-fixtures chat_templates` (commit what it writes), or
directly from the repository root:
    PYTHONPATH=scripts/reference python scripts/reference/chat_templates.py [--from-hub]

The templates are the models' own, in one trimmed tokenizer_config.json per family (the chat
template and the named special tokens, as the model's repository has them):

  llama3_1/      meta-llama/Llama-3.1-8B-Instruct
  llama3_2/      meta-llama/Llama-3.2-1B-Instruct (the same template as 3B)
  qwen2_5/       Qwen/Qwen2.5-0.5B-Instruct (the same template across the Instruct sizes)
  qwen3/         Qwen/Qwen3-0.6B
  mistral_v0_1/  mistralai/Mistral-7B-Instruct-v0.1 (special tokens in the {"content": ...} form
                 older transformers saved)
  mistral_v0_3/  mistralai/Mistral-7B-Instruct-v0.3
  gemma2/        google/gemma-2-2b-it

The committed copies came from public mirrors of those files; the Gemma 2 template is the one
whose SHA-256 the mirrors record. With --from-hub (and network, and access to the gated Llama and
Gemma repositories) the script first replaces each chat_template and special token from the hub.

Then it renders every conversation below with every family's template through transformers'
apply_chat_template(tokenize=False), with strftime_now fixed at NOW, and writes:

  expected.json    for each family and conversation: the rendered text, or the message the
                   template raised; and, where the template has {% generation %} blocks, the byte
                   ranges (UTF-8) of the assistant text transformers tracks
  generation/      two templates with {% generation %} blocks: Llama 3.2's with the assistant's
                   turns marked (derived here from the real one) and a plain chatml one
  semantics.json   small templates that pin Jinja and Python behaviour the interpreter must match
                   (whitespace control, operators, filters, tests, string methods, number
                   formatting, scoping), each with its output or its error
  chat_tokenizer.json  a byte-level BPE tokenizer (Llama 3's pre-tokenizer) trained here with the
                   chat special tokens of Llama 3 and chatml as added tokens
  tokens.json      the ids that tokenizer gives a rendered Llama 3.2 and Qwen 2.5 conversation
  versions.json    the library versions that made them
"""
import argparse
import datetime
import json
import os
import re

import jinja2
import transformers.utils.chat_template_utils as chat_utils
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from _common import fixture_dir, write_versions

OUT = fixture_dir("chat_templates")

FAMILIES = {
    "llama3_1": "meta-llama/Llama-3.1-8B-Instruct",
    "llama3_2": "meta-llama/Llama-3.2-1B-Instruct",
    "qwen2_5": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen3": "Qwen/Qwen3-0.6B",
    "mistral_v0_1": "mistralai/Mistral-7B-Instruct-v0.1",
    "mistral_v0_3": "mistralai/Mistral-7B-Instruct-v0.3",
    "gemma2": "google/gemma-2-2b-it",
}
SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                  "mask_token"]

# What strftime_now sees; the C++ tests render with the same local time.
NOW = datetime.datetime(2024, 9, 26, 10, 30, 0)


class FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. \"Zürich\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

TRICKY = ("  Quotes 'single' and \"double\", a backslash \\ and {{ braces }} {% not a tag %}\n"
          "Unicode: 中文, Ελληνικά, emoji 👍🏽👨‍👩‍👧, café, עברית\n\ttab\r\nCRLF line  \n")

# name -> (messages, keyword arguments of apply_chat_template)
CONVERSATIONS = {
    "system_user_assistant": ([
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
    ], {}),
    "multi_turn_generation_prompt": ([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Name two primes."},
        {"role": "assistant", "content": "2 and 3."},
        {"role": "user", "content": "And one more?"},
    ], {"add_generation_prompt": True}),
    "no_system": ([
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Again."},
    ], {"add_generation_prompt": True}),
    "no_system_no_prompt": ([
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi."},
    ], {"add_generation_prompt": False}),
    "single_user_prompt": ([
        {"role": "user", "content": "Hello"},
    ], {"add_generation_prompt": True}),
    "quotes_unicode_newlines": ([
        {"role": "system", "content": TRICKY},
        {"role": "user", "content": TRICKY},
        {"role": "assistant", "content": "\n  " + TRICKY + "  \n"},
    ], {}),
    "roles_do_not_alternate": ([
        {"role": "user", "content": "One."},
        {"role": "user", "content": "Two."},
    ], {"add_generation_prompt": True}),
    "system_only": ([
        {"role": "system", "content": "Only a system prompt."},
    ], {"add_generation_prompt": True}),
    "empty_content": ([
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
    ], {}),
    "tools": ([
        {"role": "system", "content": "Use tools when useful."},
        {"role": "user", "content": "Weather in Zürich?"},
    ], {"tools": [WEATHER_TOOL], "add_generation_prompt": True}),
    "tool_call_and_result": ([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call0abcd", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
        }]},
        {"role": "tool", "tool_call_id": "call0abcd", "content": "{\"temperature\": 21}"},
        {"role": "assistant", "content": "It is 21 °C in Paris."},
    ], {"tools": [WEATHER_TOOL]}),
    "two_tool_calls": ([
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "tool_calls": [
            {"id": "call1abcd", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "call2abcd", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
        ]},
    ], {}),
    "thinking": ([
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "6", "reasoning_content": "Add again."},
    ], {}),
    "thinking_disabled": ([
        {"role": "user", "content": "Quick: 1+1?"},
    ], {"add_generation_prompt": True, "enable_thinking": False}),
    "date_string": ([
        {"role": "user", "content": "What day is it?"},
    ], {"add_generation_prompt": True, "date_string": "01 Jan 2025"}),
}

# Templates that pin the semantics the families' templates rely on and their neighbours use.
# name -> (template, variables)
SEMANTICS = {
    "lstrip_trim_blocks": ("  {% if x %}\n    yes\n  {% endif %}\n{# c #}\nend", {"x": True}),
    "strip_markers": ("a  {%- if x -%}  b  {%- endif -%}  c {{- ' d ' -}} e", {"x": True}),
    "plus_keeps": ("  {%+ if x %}k{% endif +%}\nz", {"x": True}),
    "comment_strip": ("a\n  {#- c -#}\n  b", {}),
    "trailing_newline": ("x\n", {}),
    "crlf": ("a\r\n{% if x %}\r\nb\r\n{% endif %}\r\nc", {"x": True}),
    "raw": ("{% raw %}{{ not rendered }}{% endraw %}", {}),
    "print_values": ("{{ none }}|{{ true }}|{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1e-05 }}|"
                     "{{ 10 / 4 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|"
                     "{{ 7.5 // 2 }}|{{ -7.5 % 2 }}|{{ [1, 'a', none] }}|{{ {'k': 'v'} }}|"
                     "{{ (1,) }}|{{ 'it\\'s' ~ \"\" }}|{{ x }}|{{ [\"it's\"] }}", {}),
    "string_ops": ("{{ 'ab' * 3 }}|{{ 'a' + 'b' }}|{{ 'x' ~ 1 ~ none }}|{{ 'abc'[::-1] }}|"
                   "{{ 'héllo'[1:3] }}|{{ 'héllo'[-1] }}|{{ 'héllo'|length }}|"
                   "{{ [1,2,3,4][1:] }}|{{ [1,2,3,4][::2] }}|{{ [1,2,3][-1] }}", {}),
    "methods": ("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|"
                "{{ ' a  b '.split() }}|{{ 'a b c'.split(none, 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|"
                "{{ 'Hello'.startswith('He') }}|{{ 'Hello'.endswith(('x', 'lo')) }}|"
                "{{ 'they\\'re bill'.title() }}|{{ 'hELLO'.capitalize() }}|"
                "{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'hello'.find('l') }}|"
                "{{ 'hello'.upper() }}|{{ ', '.join(['a', 'b']) }}|"
                "{{ '\\n\\nx\\n'.lstrip('\\n') }}|{{ 'a\\nb\\r\\nc'.splitlines() }}", {}),
    "dict_methods": ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.get('a') }}|"
                     "{{ d.get('zz', 'dflt') }}|{{ d.get('zz') }}|{{ d.keys()|list }}|"
                     "{{ 'a' in d }}|{{ d['b'] }}|{{ d.b }}", {"d": {"a": 1, "b": [2, 3]}}),
    "filters": ("{{ '  x  '|trim }}|{{ 'A'|lower }}|{{ 'a'|upper }}|{{ none|default('d') }}|"
                "{{ ''|default('e', true) }}|{{ undefined_name|default('u') }}|"
                "{{ [1,2]|join('-') }}|{{ [3,1]|first }}|{{ [3,1]|last }}|{{ 'ab'|first }}|"
                "{{ 'hello world'|title }}|{{ 'hello'|capitalize }}|{{ 'aXa'|replace('a','b') }}|"
                "{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 2.1|round(0, 'ceil') }}|"
                "{{ '42'|int }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ 3.9|int }}|{{ '2.5'|float }}|"
                "{{ -3|abs }}|{{ [3,1,2]|sort }}|{{ ['b','A','a']|sort }}|{{ [1,2,3]|reverse|list }}|"
                "{{ [1,1,2]|unique|list }}|{{ [1,2,3]|sum }}|{{ [4,2,9]|max }}|{{ [4,2,9]|min }}|"
                "{{ 'a\\nb'|indent(2) }}|{{ 1|string ~ 2 }}|{{ {'b':1,'a':2}|dictsort }}", {}),
    "tojson": ("{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|"
               "{{ [1.5, true, none]|tojson }}|{{ d|tojson(sort_keys=true) }}|"
               "{{ d|tojson(separators=(',', ':')) }}|{{ 'é'|tojson(ensure_ascii=true) }}",
               {"d": {"z": [1, {"y": "é"}], "a": {}}}),
    "select_map": ("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}|"
                   "{{ ms|rejectattr('role', 'equalto', 'user')|list|length }}|"
                   "{{ [1,2,3,4]|select('odd')|list }}|{{ [1,2,3,4]|reject('even')|list }}|"
                   "{{ ms|map(attribute='missing', default='-')|join }}|"
                   "{{ ['a','b']|map('upper')|join }}|{{ ms|selectattr('content')|list|length }}",
                   {"ms": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": ""},
                           {"role": "user", "content": "u2"}]}),
    "tests": ("{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}"
              "{{ 's' is string }}{{ {} is mapping }}{{ 's' is iterable }}{{ 1 is iterable }}"
              "{{ [] is sequence }}{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}"
              "{{ true is number }}{{ true is boolean }}{{ 3 is odd }}{{ 4 is even }}"
              "{{ 9 is divisibleby 3 }}{{ 1 is equalto 1 }}{{ 1 is eq 1.0 }}{{ 2 is gt 1 }}"
              "{{ 'a' is in 'abc' }}{{ 'ABC' is upper }}{{ 'abc' is lower }}"
              "{{ y is iterable }}{{ y is sequence }}{{ true is sameas true }}", {"x": 1}),
    "operators": ("{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' in ['a'] }}{{ 'b' not in 'abc' }}"
                  "{{ not 0 }}{{ 0 or 'x' }}{{ 1 and 'y' }}{{ [] or [] }}{{ 1 == 1.0 }}"
                  "{{ true == 1 }}{{ 'a' != 'b' }}{{ (1, 2) == [1, 2] }}{{ [1, 2] == [1, 2] }}"
                  "{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}{{ 'x' if 0 else 'y' }}"
                  "{{ 'x' if 0 }}|{{ -2 ** 2 }}|{{ 2 + 3 * 4 }}|{{ 'a' ~ (1 + 2) }}|{{ 2 ** 3 ** 2 }}|"
                  "{{ 1 if none is none else 2 }}", {}),
    "loops": ("{% for x in xs %}{{ loop.index }}/{{ loop.length }}{{ loop.first }}{{ loop.last }}"
              "{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.cycle('a','b') }};{% else %}none"
              "{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}|"
              "{% for x in xs if x != 2 %}{{ loop.index0 }}{{ x }}{% endfor %}|"
              "{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}"
              "{% endif %}{{ x }}{% endfor %}|{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}|"
              "{% for c in 'hé' %}[{{ c }}]{% endfor %}|"
              "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|"
              "{% for x in xs %}{% for y in xs %}{{ loop.depth }}{% endfor %}{% endfor %}",
              {"xs": [1, 2, 3]}),
    "scoping": ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|"
                "{{ x }}|{% set ns = namespace(total=0, items=[]) %}{% for i in [1, 2, 3] %}"
                "{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}"
                "{{ ns.total }}{{ ns.items }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}|"
                "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set block %}in {{ x }}{% endset %}"
                "{{ block }}|{% with z = 3 %}{{ z }}{% endwith %}{{ z }}|"
                "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                "{{ greet('A') }}{{ greet('B', punct='?') }}", {}),
    "undefined": ("[{{ missing }}][{{ missing|length }}][{{ missing is defined }}]"
                  "[{% for x in missing %}x{% endfor %}][{{ d.nokey }}][{{ d['nokey'] }}]"
                  "[{{ [1][5] }}][{{ none.attr }}][{{ 'a' in missing }}]", {"d": {}}),
    "strftime": ("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}|"
                 "{{ strftime_now is defined }}", {}),
    "range": ("{% for i in range(3) %}{{ i }}{% endfor %}|{{ range(1, 10, 3)|list }}|"
              "{{ range(5, 0, -2)|list }}|{{ dict(a=1) }}", {}),
    "whitespace_corners": ("  {% if x %}a{% endif %}  {{ x }}  \n\t{% if x %}\n\tb\n{%- endif %}"
                           "\nline {% if x %}mid{% endif %} end\n  {# note #}  \n{{- ' v ' }}\n"
                           "{% for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}\n{% if x %}\n\n"
                           "{% endif %}|", {"x": True}),
    "unicode_space": ("[{{ '\u3000x\u00a0'|trim }}][{{ ' \u2003y\u2028'.strip() }}]"
                      "[{{ 'a\u3000b c'.split() }}]", {}),
    "repr": ("{{ [\"a'b\", 'c\"d', 'e\\nf', 'é', '\\\\', none, true, 1.5, (1, 2)] }}|"
             "{{ {'k': [1, {'n': none}]} }}", {}),
    "floats": ("{{ 1e22 }}|{{ 123456789012345678.0 }}|{{ 0.1 }}|{{ -0.0 }}|{{ 1.5e-7 }}|"
               "{{ 100.0 }}|{{ 1e15 }}|{{ 3.14159 }}|{{ 7 / 7 }}|{{ 2 ** -1 }}|{{ 10 // 3.0 }}|"
               "{{ -7.5 // 2 }}|{{ 0.5|round }}|{{ 1.5|round }}|{{ -0.5|round }}|{{ 10|round }}|"
               "{{ 2.5|round(0, 'floor') }}|{{ 1/3 }}|{{ 2/3|round(3) }}|{{ x|tojson }}",
               {"x": {"f": 0.1, "g": 1e-07, "i": 10, "b": False}}),
    "numbers_from_text": ("{{ 3.0|int }}|{{ '  12  '|int }}|{{ '1_000'|int }}|{{ '-5'|int }}|"
                          "{{ true|int }}|{{ none|int }}|{{ 'x'|int(7) }}|{{ '1e3'|int }}|"
                          "{{ '1e3'|float }}|{{ ' 2.5 '|float }}|{{ 'nope'|float }}", {}),
    "json_corners": ("{{ [1, [2, 3], {}] | tojson(indent=2) }}|{{ {'a': none} | tojson }}|"
                     "{{ '\u0001\x7f\t'|tojson }}|{{ '😀'|tojson(ensure_ascii=true) }}|"
                     "{{ 'a'|tojson(indent=2) }}|{{ [] | tojson(indent=2) }}", {}),
    "sequences": ("{{ 'héllo'[::-2] }}|{{ 'abc'[1] }}|[{{ 'abc'[-4] }}]|{{ 'abc'[5:] }}|"
                  "{{ [1,2,3][-5:2] }}|{{ [1,2,3][::-1] }}|{{ [1,2,3,4,5][4:0:-2] }}|"
                  "{{ d|length }}{{ d|list }}{{ d|first }}|{{ dict(a=1, b=2)|items|list }}|"
                  "{{ ('a', 'b')|join(', ') }}|{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}"
                  "{{ 'b' in d }}{{ 'z' in d }}|{{ 'hello world foo'.split(' ', 1) }}",
                  {"d": {"b": 1, "a": 2}}),
    "titles": ("{{ 'a-b_c'.title() }}|{{ 'hello-world'|title }}|{{ \"o'neil mc-donald\"|title }}|"
               "{{ '  x\n'.rstrip() }}|{{ 'ABC def'.lower() }}|{{ 'mIxEd'|capitalize }}", {}),
    "loop_neighbours": ("{% for x in [1, 2, 3] %}({{ loop.previtem }},{{ loop.nextitem }})"
                        "{% endfor %}|{% for x in [1, 2, 3, 4] if x is even %}{{ loop.index }}"
                        "{{ loop.length }}{{ loop.last }}{% endfor %}|"
                        "{% for i in [1, 2] %}{% set b %}[{{ i }}]{% endset %}{{ b }}{% endfor %}",
                        {}),
    "generators": ("{% if []|select %}T{% endif %}|{{ [1, 2]|select('odd') is sequence }}"
                   "{{ [1, 2]|map('string') is iterable }}|{{ ([]|map('upper'))|list }}|"
                   "{{ [1, 2]|reverse|join }}|{{ {'a': 1}|items|list }}|{{ 'ab'|reverse }}|"
                   "{{ [3, 1, 3]|unique|list }}|{{ [1, 2]|select|first }}", {}),
    "error_length_of_generator": ("{{ [1, 2]|select|length }}", {}),
    "error_last_of_generator": ("{{ [1, 2]|map('string')|last }}", {}),
    "error_attribute_of_undefined": ("{{ missing.attr }}", {}),
    "error_add_types": ("{{ 'a' + 1 }}", {}),
    "error_concat_binds_tighter_than_plus": ("{{ 'a' ~ 1 + 2 }}", {}),
    "error_raise": ("{{ raise_exception('custom message: ' ~ x) }}", {"x": 7}),
    "error_division": ("{{ 1 / 0 }}", {}),
    "error_range_too_big": ("{{ range(1000000)|length }}", {}),
}


def load_configs(from_hub):
    configs = {}
    for family, repo in FAMILIES.items():
        path = os.path.join(OUT, family, "tokenizer_config.json")
        with open(path) as f:
            config = json.load(f)
        if from_hub:
            from huggingface_hub import hf_hub_download
            with open(hf_hub_download(repo, "tokenizer_config.json")) as f:
                hub = json.load(f)
            config["chat_template"] = hub["chat_template"]
            for key in SPECIAL_TOKENS:
                if key in hub:
                    config[key] = hub[key]
            with open(path, "w") as f:
                json.dump(dict(sorted(config.items())), f, indent=2, ensure_ascii=False)
                f.write("\n")
        configs[family] = config
    return configs


def special_text(value):
    if isinstance(value, dict):
        return value["content"]
    return value


def make_tokenizer(config):
    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel()
    tokens = {key: special_text(config[key]) for key in SPECIAL_TOKENS if config.get(key)}
    tok = PreTrainedTokenizerFast(tokenizer_object=model, **tokens)
    tok.chat_template = config["chat_template"]
    return tok


def render(tok, template, messages, kwargs):
    """The text apply_chat_template renders, and the byte ranges of generation blocks."""
    try:
        text = tok.apply_chat_template(messages, chat_template=template, tokenize=False, **kwargs)
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}
    result = {"text": text}
    if re.search(r"\{%-?\s*generation\s*-?%\}", template):
        # apply_chat_template only reports the spans as a token mask; the spans themselves come
        # from the same renderer it calls, with the same inputs.
        args = dict(kwargs)
        tools = args.pop("tools", None)
        add_generation_prompt = args.pop("add_generation_prompt", False)
        rendered, spans = chat_utils.render_jinja_template(
            conversations=[chat_utils._normalize_chat_messages(messages)], tools=tools,
            chat_template=template, return_assistant_tokens_mask=True,
            add_generation_prompt=add_generation_prompt, **{**tok.special_tokens_map, **args})
        assert rendered[0] == text
        result["generation_spans"] = [[len(text[:b].encode()), len(text[:e].encode())]
                                      for b, e in spans[0]]
    return result


def generation_templates(configs):
    llama = configs["llama3_2"]["chat_template"]
    plain = ("        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
             "message['content'] | trim + '<|eot_id|>' }}\n")
    assert plain in llama, "the Llama 3.2 template changed; update the generation variant"
    marked = ("        {%- if message['role'] == 'assistant' %}\n"
              "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
              "            {%- generation %}\n"
              "            {{- message['content'] | trim + '<|eot_id|>' }}\n"
              "            {%- endgeneration %}\n"
              "        {%- else %}\n"
              "    " + plain +
              "        {%- endif %}\n")
    chatml = ("{%- for message in messages %}\n"
              "    {%- if message.role == 'assistant' %}\n"
              "        {{- '<|im_start|>assistant\\n' }}\n"
              "        {% generation %}{{ message.content }}<|im_end|>{% endgeneration %}\n\n"
              "    {%- else %}\n"
              "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
              "    {%- endif %}\n"
              "{%- endfor %}\n"
              "{%- if add_generation_prompt %}\n"
              "    {{- '<|im_start|>assistant\\n' }}\n"
              "{%- endif %}\n")
    return {
        "llama3_2_generation": dict(configs["llama3_2"], chat_template=llama.replace(plain, marked)),
        "chatml_generation": {"chat_template": chatml, "eos_token": "<|im_end|>"},
    }


def semantics():
    env_template = chat_utils._compile_jinja_template
    results = {}
    for name, (template, variables) in SEMANTICS.items():
        entry = {"template": template, "variables": variables}
        try:
            entry["text"] = env_template(template).render(**variables)
        except (jinja2.exceptions.TemplateError, ArithmeticError, TypeError) as e:
            entry["error"] = str(e)
        results[name] = entry
    return results


def chat_tokenizer(configs):
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    corpus = [m["content"] for messages, _ in CONVERSATIONS.values() for m in messages
              if isinstance(m.get("content"), str)] * 4
    tok.train_from_iterator(corpus, trainer=trainer)
    with open(os.path.join(OUT, "chat_tokenizer.json"), "w") as f:
        json.dump(json.loads(tok.to_str()), f, ensure_ascii=False, indent=1)
        f.write("\n")
    messages, kwargs = CONVERSATIONS["multi_turn_generation_prompt"]
    expected = {"added": {s: tok.token_to_id(s) for s in specials}}
    for family in ["llama3_2", "qwen2_5"]:
        text = make_tokenizer(configs[family]).apply_chat_template(
            messages, tokenize=False, **kwargs)
        expected[family] = {"text": text, "ids": tok.encode(text, add_special_tokens=False).ids}
    with open(os.path.join(OUT, "tokens.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--from-hub", action="store_true",
                        help="refresh the templates and special tokens from the Hugging Face hub")
    args = parser.parse_args()
    chat_utils.datetime = FixedDatetime
    configs = load_configs(args.from_hub)

    extra = generation_templates(configs)
    for name, config in extra.items():
        os.makedirs(os.path.join(OUT, "generation"), exist_ok=True)
        with open(os.path.join(OUT, "generation", name + ".jinja"), "w") as f:
            f.write(config["chat_template"])

    expected = {"now": NOW.strftime("%Y-%m-%d %H:%M:%S"), "conversations": {}, "families": {}}
    for name, (messages, kwargs) in CONVERSATIONS.items():
        expected["conversations"][name] = {"messages": messages, "options": kwargs}
    for family, config in {**configs, **extra}.items():
        tok = make_tokenizer(config)
        expected["families"][family] = {
            name: render(tok, config["chat_template"], messages, kwargs)
            for name, (messages, kwargs) in CONVERSATIONS.items()
        }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "semantics.json"), "w") as f:
        json.dump(semantics(), f, ensure_ascii=False, indent=1)
        f.write("\n")
    chat_tokenizer(configs)
    write_versions(OUT, ["jinja2", "tokenizers", "transformers"])


if __name__ == "__main__":
    main()
