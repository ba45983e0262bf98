"""Token-in / token-out chat formatting for multi-turn rollouts.

A trajectory's ids are built by appending, never by re-rendering: the prompt is the chat template
applied once to the opening messages; each later observation is the template's rendering of ONLY the
new messages (plus the next generation prompt), appended after the tokens the model sampled. The
model's own tokens are never decoded and re-encoded into the sequence, so the learner trains on
exactly the ids the engine saw.

To render "only the new messages" with an arbitrary template, we render a two-message reference
conversation (user, assistant) whose assistant content is a sentinel string, once without and once
with the new messages, and keep the text that follows the sentinel's end-of-turn suffix. This is
correct for templates whose rendering of a message depends only on the messages before it (Qwen,
Llama 3, Mistral-style templates do); the test suite checks the appended ids against a full render.

This module is not a chat client: it does not decode model output for display, and it never sees
an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from envs.base import Message

__all__ = ["ChatFormat", "ChatTemplateError", "strip_past_reasoning"]

# A string no real conversation contains and no template rewrites (no whitespace, no markup).
_SENTINEL = "GSPOSENTINELq7Zk"
_REFERENCE_USER = "GSPOREFUSERw3Xp"


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be used for token-level multi-turn rollouts."""


class ChatTokenizer(Protocol):
    """The slice of a Hugging Face tokenizer this module uses."""

    eos_token_id: int | None
    all_special_ids: list[int]

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass(frozen=True, slots=True)
class _TemplateFacts:
    end_of_turn_text: str  # what the template puts after an assistant message's content
    end_of_turn_ids: tuple[int, ...]  # the same, tokenized
    stop_token_ids: tuple[int, ...]  # ids that end a model turn


class ChatFormat:
    """Builds prompt and observation ids for one tokenizer; decodes the model's turn to text."""

    __slots__ = (
        "tokenizer",
        "_facts",
        "_render_fast",
        "_encode_fast",
        "_decode_fast",
        "_special_texts",
    )

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(
                f"{type(tokenizer).__name__} has no chat_template; multi-turn rollouts need one "
                "(set tokenizer.chat_template or use a chat/instruct tokenizer)"
            )
        self.tokenizer = tokenizer
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        specials = set(getattr(tokenizer, "all_special_tokens", []) or [])
        specials |= {str(t) for t in added.values() if getattr(t, "special", False)}
        self._special_texts = tuple(
            sorted((t for t in specials if len(t) > 1), key=len, reverse=True)
        )
        self._render_fast = _fast_renderer(tokenizer)
        self._encode_fast = _fast_encoder(tokenizer)
        self._decode_fast = _fast_decoder(tokenizer, self)
        self._facts = _probe_template(self)

    @property
    def end_of_turn_ids(self) -> tuple[int, ...]:
        return self._facts.end_of_turn_ids

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """Pass to the engine so a model turn ends where the template ends an assistant message."""
        return self._facts.stop_token_ids

    def prompt_ids(
        self, messages: list[Message], tools: Sequence[dict[str, Any]] | None = None
    ) -> list[int]:
        """The opening messages rendered once, ending with the generation prompt. `tools`
        (OpenAI function-format schemas) go to the template's `tools=`, as Qwen3's renders them."""
        if tools:
            text = self._render_with_tools(messages, list(tools))
        else:
            text = self._render(messages, add_generation_prompt=True)
        return self._encode(text)

    def _render_with_tools(self, messages: list[Message], tools: list[dict[str, Any]]) -> str:
        # Once per trajectory: the reference path (apply_chat_template) is fast enough.
        try:
            out = self.tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=True
            )
        except Exception as exc:  # jinja's own errors
            raise ChatTemplateError(f"the chat template rejected tools= ({exc})") from exc
        if not isinstance(out, str):
            raise ChatTemplateError(
                f"apply_chat_template(tokenize=False) returned {type(out).__name__}"
            )
        if not any(t["function"]["name"] in out for t in tools if "function" in t):
            raise ChatTemplateError(
                "the chat template ignores tools= (no tool name appears in the rendered prompt); "
                "use a tool-aware template such as Qwen3's"
            )
        return out

    def observation_ids(self, messages: list[Message], model_turn_ids: Sequence[int]) -> list[int]:
        """Ids to append after a finished model turn: the rest of its end-of-turn marker (when the
        model stopped before emitting all of it, e.g. at a length limit), the new messages, and
        the next generation prompt."""
        if not messages:
            raise ValueError("observation_ids needs at least one new message")
        eot = self._facts.end_of_turn_ids
        missing = eot[_emitted_prefix_len(model_turn_ids, eot) :]
        safe = [{**m, "content": self._defuse(m.get("content", ""))} for m in messages]
        return list(missing) + self._encode(self._delta(safe))

    def _defuse(self, text: str) -> str:
        """Env output is untrusted (it is what generated code printed): a special-token string
        inside it must stay text, or a program printing '<|im_start|>assistant' forges a turn.
        A zero-width space after the first character keeps it readable but never special."""
        for token in self._special_texts:
            if token in text:
                text = text.replace(token, token[0] + "\u200b" + token[1:])
        return text

    def action_text(self, model_turn_ids: Sequence[int]) -> str:
        """The text the environment sees for a model turn (special tokens dropped)."""
        if self._decode_fast is not None:
            return self._decode_fast(list(model_turn_ids))
        return self.tokenizer.decode(list(model_turn_ids), skip_special_tokens=True)

    # -- rendering ------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        if self._encode_fast is not None:
            return self._encode_fast(text)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _render(self, messages: list[Message], *, add_generation_prompt: bool) -> str:
        try:
            if self._render_fast is not None:
                return self._render_fast(messages, add_generation_prompt)
            return _render_reference(self.tokenizer, messages, add_generation_prompt)
        except ChatTemplateError:
            raise
        except Exception as exc:  # jinja raises its own errors for unsupported role orders
            raise ChatTemplateError(
                f"the chat template rejected {_roles(messages)}: {exc}"
            ) from exc

    def _delta(self, messages: list[Message]) -> str:
        reference = _reference_conversation()
        full = self._render(reference + list(messages), add_generation_prompt=True)
        start = full.rfind(_SENTINEL)
        if start < 0:
            raise ChatTemplateError("the chat template drops earlier assistant messages")
        rest = full[start + len(_SENTINEL) :]
        eot_text = self._facts.end_of_turn_text
        if not rest.startswith(eot_text):
            raise ChatTemplateError(
                "the chat template renders an assistant message differently once more messages "
                f"follow it ({eot_text!r} vs {rest[: len(eot_text)]!r}); token-level multi-turn "
                "rollouts need a template whose past turns do not change"
            )
        return rest[len(eot_text) :]


def strip_past_reasoning(messages: list[Message]) -> list[Message]:
    """`rollout.past_reasoning=strip`: Qwen3's rule, applied before rendering. Assistant messages
    before the last user message keep only what follows their last `</think>` (leading newlines
    dropped); later ones, and every other message, are left as they are. The ids this renders
    for the history differ from the ones the model generated, so a conversation rendered this
    way is a new sequence, not an extension of the previous turn's tokens."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    out: list[Message] = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if i < last_user and m.get("role") == "assistant" and isinstance(content, str):
            if "</think>" in content:
                m = {**m, "content": content.rsplit("</think>", 1)[1].lstrip("\n")}
        out.append(m)
    return out


def _reference_conversation() -> list[Message]:
    return [
        {"role": "user", "content": _REFERENCE_USER},
        {"role": "assistant", "content": _SENTINEL},
    ]


def _end_of_turn_text(fmt: ChatFormat) -> str:
    rendered = fmt._render(_reference_conversation(), add_generation_prompt=False)
    start = rendered.rfind(_SENTINEL)
    if start < 0:
        raise ChatTemplateError("the chat template does not render the assistant's content")
    return rendered[start + len(_SENTINEL) :]


def _probe_template(fmt: ChatFormat) -> _TemplateFacts:
    tokenizer = fmt.tokenizer
    eot_text = _end_of_turn_text(fmt)
    eot_ids = tuple(fmt._encode(eot_text))
    special = set(tokenizer.all_special_ids)
    stops: list[int] = []
    # The first id of the end-of-turn marker is where the model stops (<|im_end|>, <|eot_id|>);
    # only a special token can serve, a plain "\n" would end every line.
    if eot_ids and eot_ids[0] in special:
        stops.append(eot_ids[0])
    eos = tokenizer.eos_token_id
    for tok in eos if isinstance(eos, list) else [eos]:
        if tok is not None and tok not in stops:
            stops.append(int(tok))
    if not stops:
        raise ChatTemplateError(
            "cannot tell where a model turn ends: the tokenizer has no eos_token_id and the "
            "template's end-of-turn marker does not start with a special token"
        )
    return _TemplateFacts(eot_text, eot_ids, tuple(stops))


# -- fast paths -----------------------------------------------------------------------------------
# apply_chat_template and the Python tokenizer wrapper cost ~100 and ~130 us per call in
# transformers 5, most of it argument handling; the manager pays them on every turn. The fast
# paths render with the same compiled template and encode with the same Rust tokenizer, and are
# only used when they reproduce the reference path exactly on probe conversations.

_PROBES: tuple[list[Message], ...] = (
    [{"role": "user", "content": "Compute 12 + 30.\nShow your work."}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello! 42"},
        {"role": "user", "content": "again <b> & 'quotes'"},
    ],
)


def _render_reference(tokenizer: Any, messages: list[Message], add_generation_prompt: bool) -> str:
    out = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    if not isinstance(out, str):
        raise ChatTemplateError(
            f"apply_chat_template(tokenize=False) returned {type(out).__name__}"
        )
    return out


def _fast_renderer(tokenizer: Any) -> Callable[[list[Message], bool], str] | None:
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return None
    # Template variables apply_chat_template passes besides the messages: the special tokens.
    specials = {k: v for k, v in getattr(tokenizer, "special_tokens_map", {}).items()}
    for render in _fast_render_candidates(template, specials):
        try:
            if all(
                render(probe, gen) == _render_reference(tokenizer, probe, gen)
                for probe in _PROBES
                for gen in (False, True)
            ):
                return render
        except Exception:  # noqa: BLE001 - an API that moved: try the next, or use the reference
            continue
    return None


def _fast_render_candidates(template: str, specials: dict[str, Any]):
    """Renderers from fastest to safest; each must match apply_chat_template on the probes."""
    try:
        from transformers.utils import chat_template_utils as ctu
    except ImportError:
        return
    compile_template = getattr(ctu, "_compile_jinja_template", None)
    if compile_template is not None:
        try:
            compiled = compile_template(template)
        except Exception:  # noqa: BLE001
            compiled = None
        if compiled is not None:
            # The compiled template itself (~20 us); render_jinja_template adds ~80 us of
            # argument normalisation per call that plain str messages do not need.
            def render_compiled(messages: list[Message], add_generation_prompt: bool) -> str:
                return compiled.render(
                    messages=messages, add_generation_prompt=add_generation_prompt, **specials
                )

            yield render_compiled
    render_jinja = getattr(ctu, "render_jinja_template", None)
    if render_jinja is not None:

        def render_public(messages: list[Message], add_generation_prompt: bool) -> str:
            rendered, _ = render_jinja(
                [messages],
                chat_template=template,
                add_generation_prompt=add_generation_prompt,
                **specials,
            )
            return rendered[0]

        yield render_public


def _fast_encoder(tokenizer: Any) -> Callable[[str], list[int]] | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None

    def encode(text: str) -> list[int]:
        return backend.encode(text, add_special_tokens=False).ids

    try:
        for probe in _PROBES:
            text = _render_reference(tokenizer, probe, True)
            if encode(text) != list(tokenizer.encode(text, add_special_tokens=False)):
                return None
    except Exception:  # noqa: BLE001
        return None
    return encode


def _fast_decoder(tokenizer: Any, fmt: ChatFormat) -> Callable[[list[int]], str] | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None

    def decode(ids: list[int]) -> str:
        return backend.decode(ids, skip_special_tokens=True)

    try:
        for probe in _PROBES:
            ids = fmt._encode(_render_reference(tokenizer, probe, True))
            if decode(ids) != tokenizer.decode(ids, skip_special_tokens=True):
                return None
    except Exception:  # noqa: BLE001
        return None
    return decode


def _emitted_prefix_len(model_turn_ids: Sequence[int], eot: Sequence[int]) -> int:
    """How much of the end-of-turn marker the model already emitted at the end of its turn."""
    for k in range(min(len(eot), len(model_turn_ids)), 0, -1):
        if list(model_turn_ids[-k:]) == list(eot[:k]):
            return k
    return 0


def _roles(messages: list[Message]) -> str:
    return "roles [" + ", ".join(str(m.get("role")) for m in messages) + "]"
