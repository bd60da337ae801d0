"""Prompts in the model's chat format, and demonstrations the tool-call parser accepts."""

from __future__ import annotations

import copy

import pytest

from environments.json_tool_call import make_task
from environments.parsing import parse_tool_calls
from environments.types import ToolCall, ToolSpec
from training.prompts import (
    COMPACT_INSTRUCTION,
    ChatFormat,
    describe_tool,
    render_prompt,
    render_sft_target,
    resolve_style,
)

SEND = ToolSpec(
    name="email_send_email",
    description="Send an email.\nUse it only when asked.",
    parameters={
        "type": "object",
        "properties": {
            "recipient": {"type": "string"},
            "subject": {"type": "string"},
            "priority": {"type": "string", "enum": ["low", "high"]},
        },
        "required": ["recipient", "subject"],
    },
    writes=True,
)
SEARCH = ToolSpec(
    name="company_directory_find_email_address",
    description="Find an email address by name.",
    parameters={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
)
TOOLS = [SEND, SEARCH]
USER = [{"role": "user", "content": "Email Dana about the Q3 report."}]

HERMES_TEMPLATE = """
{%- if tools %}<|im_start|>system
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant
{% for tc in message.tool_calls %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


@pytest.fixture(scope="module")
def native_tokenizer(tokenizer):
    """The SmolLM2 tokenizer with a Hermes/Qwen-style template that renders tools."""
    native = copy.deepcopy(tokenizer)
    native.chat_template = HERMES_TEMPLATE
    return native


def test_smollm2_prompt_lists_tools_compactly_and_ends_with_generation_prompt(tokenizer):
    prompt = render_prompt(tokenizer, USER, TOOLS)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert prompt.count("<|im_start|>system") == 1
    assert "SmolLM" not in prompt  # our system message replaces the template's default
    assert COMPACT_INSTRUCTION in prompt
    assert "- email_send_email(recipient: string, subject: string, priority?: " in prompt
    assert "- company_directory_find_email_address(name: string) - Find an email address" in prompt
    assert "Email Dana about the Q3 report." in prompt


def test_compact_style_merges_into_an_existing_system_message(tokenizer):
    messages = [{"role": "system", "content": "You work at Acme."}, *USER]
    prompt = render_prompt(tokenizer, messages, TOOLS)
    assert prompt.count("<|im_start|>system") == 1
    assert prompt.index("email_send_email") < prompt.index("You work at Acme.")


def test_prompt_that_already_lists_the_tools_is_left_alone(tokenizer):
    task = make_task("j1", "Find Dana's email.", TOOLS, ToolCall(SEARCH.name, {"name": "Dana"}))
    prompt = render_prompt(tokenizer, task.messages, task.tool_specs())
    assert prompt.count(SEARCH.name) == 1
    assert COMPACT_INSTRUCTION not in prompt


def test_without_tools_the_template_is_used_as_is(tokenizer):
    assert render_prompt(tokenizer, USER, []) == tokenizer.apply_chat_template(
        USER, tokenize=False, add_generation_prompt=True
    )


def test_auto_style_follows_the_template(tokenizer, native_tokenizer):
    assert resolve_style(tokenizer, "auto") == "compact"
    assert resolve_style(native_tokenizer, "auto") == "native"
    with pytest.raises(ValueError, match="prompt style"):
        resolve_style(tokenizer, "fancy")


def test_native_style_passes_tool_schemas_to_the_template(native_tokenizer):
    prompt = render_prompt(native_tokenizer, USER, TOOLS)
    assert '"name": "email_send_email"' in prompt and "<tools>" in prompt
    assert COMPACT_INSTRUCTION not in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_describe_tool_marks_optional_arguments_and_enums():
    line = describe_tool(SEND)
    assert line == (
        'email_send_email(recipient: string, subject: string, priority?: "low"|"high")'
        " - Send an email. Use it only when asked."
    )


@pytest.mark.parametrize(
    ("calls", "style", "expected_format"),
    [
        (ToolCall(SEARCH.name, {"name": "Dana"}), "compact", "json"),
        ({"name": SEARCH.name, "arguments": '{"name": "Zoë"}'}, "compact", "json"),
        (
            [
                ToolCall(SEARCH.name, {"name": "Dana"}),
                ToolCall(SEND.name, {"recipient": "d@x", "subject": "Q3"}),
            ],
            "compact",
            "json_list",
        ),
        (ToolCall(SEND.name, {"recipient": "d@x", "subject": "Q3"}), "native", "tool_call_tags"),
    ],
)
def test_sft_targets_parse_back_strictly_to_the_same_calls(calls, style, expected_format):
    text = render_sft_target(calls, style)
    result = parse_tool_calls(text, TOOLS, mode="strict")
    assert result.ok and result.format == expected_format
    expected = calls if isinstance(calls, list) else [calls]
    expected = [c if isinstance(c, ToolCall) else ToolCall.from_dict(c) for c in expected]
    assert [(c.name, c.arguments) for c in result.calls] == [
        (c.name, c.arguments) for c in expected
    ]


def test_sft_target_needs_a_call():
    with pytest.raises(ValueError, match="at least one"):
        render_sft_target([], "compact")


def test_native_sft_target_uses_the_templates_tool_call_format(native_tokenizer):
    chat = ChatFormat.create(native_tokenizer, TOOLS)
    target = chat.sft_target(ToolCall(SEARCH.name, {"name": "Dana"}))
    assert (
        target
        == '<tool_call>\n{"name": "company_directory_find_email_address", "arguments": {"name": "Dana"}}\n</tool_call>'
    )
    assert parse_tool_calls(target, TOOLS, mode="strict").ok


def test_tool_turn_text_is_the_template_between_turns(tokenizer, native_tokenizer):
    tool = [{"role": "tool", "tool_call_id": "c1", "name": SEARCH.name, "content": "dana@acme.com"}]
    compact = ChatFormat.create(tokenizer, TOOLS).tool_turn_text(USER, tool)
    assert (
        compact == "<|im_end|>\n<|im_start|>tool\ndana@acme.com<|im_end|>\n<|im_start|>assistant\n"
    )
    native = ChatFormat.create(native_tokenizer, TOOLS).tool_turn_text(USER, tool)
    assert native == (
        "<|im_end|>\n<|im_start|>user\n<tool_response>\ndana@acme.com\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_a_tokenizer_without_chat_template_is_refused(tokenizer):
    bare = copy.deepcopy(tokenizer)
    bare.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        render_prompt(bare, USER, TOOLS)
