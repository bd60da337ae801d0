"""Prompts and targets in the model's own chat format, with tools.

Two styles:

native   the tokenizer's chat template renders the tools (`apply_chat_template(tools=...)`),
         for models trained on tool use (Qwen, Llama 3.1+, Nemotron, Hermes ...).
compact  for small models whose template knows no tools (SmolLM2): a short system message
         lists the tools one per line and asks for exactly one JSON object
         {"name": ..., "arguments": {...}}. Tasks whose system message already lists every
         tool (json_tool_call builds its prompts that way) are left as they are.

"auto" picks native when the template mentions tools, else compact. Whatever the style, the
text a demonstration puts in the assistant turn (`render_sft_target`) is a format that
environments.parsing accepts, so SFT teaches what the verifier reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from environments.types import ToolCall, ToolSpec, describe_choices

Style = Literal["auto", "native", "compact"]

COMPACT_INSTRUCTION = (
    "To use a tool, answer with exactly one JSON object and nothing else: "
    '{"name": "<tool name>", "arguments": {"<argument>": <value>, ...}}'
)

_PLACEHOLDER = "CRUCIBLE_PLACEHOLDER_7f3a"
"""Stands in for message content when we diff two renderings of the chat template."""


def template_supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders a `tools` argument."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = " ".join(template.values())
    return isinstance(template, str) and "tools" in template


def resolve_style(tokenizer: Any, style: Style) -> Literal["native", "compact"]:
    """auto -> native when the template supports tools, else compact."""
    if style == "auto":
        return "native" if template_supports_tools(tokenizer) else "compact"
    if style not in ("native", "compact"):
        raise ValueError(f"unknown prompt style {style!r}; use auto, native or compact")
    return style


def _as_spec(tool: ToolSpec | dict[str, Any]) -> ToolSpec:
    return tool if isinstance(tool, ToolSpec) else ToolSpec.from_dict(tool)


def _describe_parameter(name: str, schema: Any, required: bool) -> str:
    schema = schema if isinstance(schema, dict) else {}
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = "|".join(map(str, kind))
    kind = describe_choices(schema) or kind
    return f"{name}{'' if required else '?'}: {kind}"


def describe_tool(tool: ToolSpec | dict[str, Any]) -> str:
    """One line: `name(arg: type, optional?: type) - description`."""
    spec = _as_spec(tool)
    params = spec.parameters if isinstance(spec.parameters, dict) else {}
    properties = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    required = set(params.get("required") or [])
    args = ", ".join(
        _describe_parameter(name, schema, name in required) for name, schema in properties.items()
    )
    description = " ".join(spec.description.split())
    return f"{spec.name}({args})" + (f" - {description}" if description else "")


def compact_system_message(tools: Sequence[ToolSpec | dict[str, Any]]) -> str:
    """The compact style's tool block: tools one per line, then the answer format."""
    lines = ["You can call these tools:"]
    lines += [f"- {describe_tool(t)}" for t in tools]
    lines.append(COMPACT_INSTRUCTION)
    return "\n".join(lines)


def _lists_tools(messages: Sequence[dict[str, Any]], tools: Sequence[ToolSpec]) -> bool:
    """Whether the system message already names every tool (json_tool_call's compact tasks)."""
    if not messages or messages[0].get("role") != "system":
        return False
    content = messages[0].get("content")
    return isinstance(content, str) and all(t.name in content for t in tools)


@dataclass
class ChatFormat:
    """How one model sees one tool set: renders prompts, tool results and targets consistently."""

    tokenizer: Any
    tools: list[ToolSpec]
    style: Literal["native", "compact"]

    @classmethod
    def create(
        cls,
        tokenizer: Any,
        tools: Sequence[ToolSpec | dict[str, Any]] | None,
        style: Style = "auto",
    ) -> ChatFormat:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "the tokenizer has no chat template; use an instruct/chat model or set "
                "tokenizer.chat_template before rendering prompts"
            )
        return cls(tokenizer, [_as_spec(t) for t in tools or []], resolve_style(tokenizer, style))

    def conversation(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages the template sees: compact style merges the tool block into the system."""
        messages = [dict(m) for m in messages]
        if self.style == "native" or not self.tools or _lists_tools(messages, self.tools):
            return messages
        block = compact_system_message(self.tools)
        if messages and messages[0].get("role") == "system":
            messages[0]["content"] = f"{block}\n\n{messages[0].get('content') or ''}".rstrip()
            return messages
        return [{"role": "system", "content": block}, *messages]

    def render(self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool) -> str:
        """The chat template applied to `conversation(messages)`, as text."""
        kwargs: dict[str, Any] = {}
        if self.style == "native" and self.tools:
            kwargs["tools"] = [t.to_openai() for t in self.tools]
        return self.tokenizer.apply_chat_template(
            self.conversation(messages),
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )

    def prompt(self, messages: Sequence[dict[str, Any]]) -> str:
        """The prompt text up to and including the assistant generation header."""
        return self.render(messages, add_generation_prompt=True)

    def tool_turn_text(
        self,
        messages: Sequence[dict[str, Any]],
        tool_messages: Sequence[dict[str, Any]],
    ) -> str:
        """The template text from the end of a generated assistant turn to the next prompt.

        That is the assistant's end-of-turn marker (e.g. "<|im_end|>\\n"), the rendered tool
        results, and the next assistant header. The generated text itself is replaced by a
        placeholder, so what the model actually produced is never re-tokenized.
        """
        placeholder_turn = {"role": "assistant", "content": _PLACEHOLDER}
        before = [*messages, placeholder_turn]
        base = self.render(before, add_generation_prompt=False)
        full = self.render([*before, *tool_messages], add_generation_prompt=True)
        if not full.startswith(base) or _PLACEHOLDER not in base:
            raise ValueError(
                "the chat template renders earlier turns differently once tool results follow, "
                "so multi-turn episodes cannot be tokenized incrementally; use style='compact' "
                "or a model whose template keeps earlier turns unchanged"
            )
        end_of_turn = base[base.rindex(_PLACEHOLDER) + len(_PLACEHOLDER) :]
        return end_of_turn + full[len(base) :]

    def sft_target(
        self, calls: ToolCall | dict[str, Any] | Sequence[ToolCall | dict[str, Any]]
    ) -> str:
        """The assistant text that demonstrates `calls` in this model's tool-call format."""
        call_list = _as_calls(calls)
        if self.style == "compact":
            return render_sft_target(call_list, "compact")
        return self._native_target(call_list) or render_sft_target(call_list, "native")

    def _native_target(self, calls: list[ToolCall]) -> str | None:
        """The template's own rendering of an assistant tool-call turn, when it has one."""
        user = [{"role": "user", "content": _PLACEHOLDER}]
        assistant = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": c.call_id or f"call_{i}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for i, c in enumerate(calls)
            ],
        }
        try:
            base = self.render(user, add_generation_prompt=True)
            full = self.render([*user, assistant], add_generation_prompt=False)
        except Exception:  # templates raise arbitrary errors on tool_calls they do not support
            return None
        if not full.startswith(base):
            return None
        target = full[len(base) :]
        eos = getattr(self.tokenizer, "eos_token", None)
        if eos and eos in target:
            target = target[: target.rindex(eos)]
        target = target.strip()
        return target if any(c.name in target for c in calls) else None


def _as_calls(
    calls: ToolCall | dict[str, Any] | Sequence[ToolCall | dict[str, Any]],
) -> list[ToolCall]:
    if isinstance(calls, (ToolCall, dict)):
        calls = [calls]
    result = [c if isinstance(c, ToolCall) else ToolCall.from_dict(c) for c in calls]
    if not result:
        raise ValueError("an SFT target needs at least one tool call")
    return result


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {"name": call.name, "arguments": call.arguments}


def render_sft_target(
    calls: ToolCall | dict[str, Any] | Sequence[ToolCall | dict[str, Any]],
    style: Literal["native", "compact"] = "compact",
) -> str:
    """Assistant text for a ground-truth demonstration, without the end-of-turn token.

    compact: one JSON object (a JSON list for several calls). native without a tokenizer:
    Hermes / Qwen <tool_call> tags, one per call. For the exact template format of a native
    model use `ChatFormat.sft_target`.
    """
    call_list = _as_calls(calls)
    if style == "compact":
        payload = [_call_json(c) for c in call_list]
        return json.dumps(payload[0] if len(payload) == 1 else payload, ensure_ascii=False)
    if style == "native":
        return "\n".join(
            f"<tool_call>\n{json.dumps(_call_json(c), ensure_ascii=False)}\n</tool_call>"
            for c in call_list
        )
    raise ValueError(f"unknown SFT target style {style!r}; use native or compact")


def clip_prompt(ids: list[int], limit: int | None) -> tuple[list[int], int]:
    """(the last `limit` prompt tokens, how many were dropped): TRL's left truncation.

    The end of a prompt (the latest request and the generation header) is what the model
    must answer; the cut is reported so an over-long task shows up instead of silently
    losing its system message.
    """
    if limit is None or len(ids) <= limit:
        return ids, 0
    return ids[len(ids) - limit :], len(ids) - limit


def render_prompt(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[ToolSpec | dict[str, Any]] | None,
    *,
    style: Style = "auto",
) -> str:
    """The generation prompt for `messages` with `tools`, in the model's chat format."""
    return ChatFormat.create(tokenizer, tools, style).prompt(messages)
