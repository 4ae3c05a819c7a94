"""Prompt assembly through the tokenizer's chat template (the Practitioner's Guide format).

A conversation is
    system:    instruction + "\\n\\nYour task: {objective}" [+ "\\n\\nAdmissible commands: ..."]
    user:      "current state: {obs_0}\\n\\nyour action: "
    assistant: action_1
    user:      "current state: {obs_1}\\n\\nyour action: "
    ...
and is rendered only through ``tokenizer.apply_chat_template`` (never by hand), so any Hugging Face
tokenizer with a template works (ChatML from :mod:`meowjax.rollout.tokenizer`, SmolLM2, Qwen2.5).

Token in, token out. The agent's sampled ids (ending in the end-of-turn token, ``<|im_end|>`` for
ChatML) are kept exactly; only the environment's reply is tokenized, as the *template delta*:

    delta_t = render(msgs_<=t + [user(obs_t)], generation_prompt)[len(head_t):]

where ``head_t`` is the rendering of ``msgs_<=t`` cut right after the last assistant message's
end-of-turn text. For ChatML: ``"\\n<|im_start|>user\\ncurrent state: ...<|im_end|>\\n"
"<|im_start|>assistant\\n"``. So ``prompt_0 + a_1 + delta_1 + a_2 + ...`` decodes to the template
rendering of the conversation; when every sampled action happens to be tokenized canonically it is
also token-for-token the encoding of that rendering. A template whose renderings are not prefixes
of each other (e.g. one that rewrites earlier turns) raises :class:`ChatTemplateError`.
(The collector renders deltas on a short context for speed and checks them against the full
rendering on early turns; see ``episodes._Builder.reply_delta``.)

Window of the last k turns (``ChatFormat.window=k``): the prompt of turn t is re-rendered as
``head(system, user(obs_s)) + sum_{j=s+1..t} (a_j + delta_j)`` with s = max(0, t - k): the kept
actions are still the exact sampled ids and the kept replies the same deltas, so token-in/token-out
holds *within* the window (deltas are context-free for ChatML, Llama-3 and most templates; a test
checks the windowed prompt against the template rendering of the windowed conversation).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

DEFAULT_INSTRUCTION = (
    "You are an agent playing a text adventure game. Each turn you see the current state of the "
    "game. Reply with exactly one short command, such as 'go north', 'take key' or 'open door'.")
USER_TEMPLATE = "current state: {observation}\n\nyour action: "

Message = dict[str, str]


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot support token-in/token-out multi-turn rollouts."""


@dataclasses.dataclass(frozen=True)
class ChatFormat:
    """How a game conversation is turned into messages.

    instruction: the agent instruction opening the system message.
    show_admissible: append the game's admissible commands (at reset) to the system message.
    window: keep only the last ``window`` completed turns in the prompt; None = full history.
    """

    instruction: str = DEFAULT_INSTRUCTION
    show_admissible: bool = False
    window: int | None = None

    def __post_init__(self):
        if self.window is not None and self.window < 0:
            raise ValueError(f"ChatFormat.window={self.window} must be >= 0 or None (full history).")


def system_message(objective: str, fmt: ChatFormat = ChatFormat(),
                   admissible: Sequence[str] | None = None) -> Message:
    """The system message: instruction, the task objective, optionally the admissible commands."""
    text = fmt.instruction
    if objective.strip():
        text += f"\n\nYour task: {objective.strip()}"
    if fmt.show_admissible and admissible:
        text += "\n\nAdmissible commands: " + ", ".join(admissible)
    return {"role": "system", "content": text}


def user_message(observation: str) -> Message:
    """The Practitioner's Guide user turn: ``"current state: {obs}\\n\\nyour action: "``."""
    return {"role": "user", "content": USER_TEMPLATE.format(observation=observation.strip())}


def build_messages(system: Message, observations: Sequence[str],
                   actions: Sequence[str]) -> list[Message]:
    """[system, user(obs_0), assistant(a_1), user(obs_1), ...].

    ``len(observations)`` is ``len(actions)`` (conversation ends on an assistant turn) or
    ``len(actions) + 1`` (ends on a user turn, ready for generation).
    """
    if len(observations) not in (len(actions), len(actions) + 1):
        raise ValueError(f"build_messages: {len(observations)} observations do not fit "
                         f"{len(actions)} actions (need equal counts or one more observation).")
    msgs = [system]
    for i, obs in enumerate(observations):
        msgs.append(user_message(obs))
        if i < len(actions):
            msgs.append({"role": "assistant", "content": actions[i]})
    return msgs


def render(tokenizer: Any, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
    """The template's text for ``messages`` (no tokenization)."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False,
                                         add_generation_prompt=add_generation_prompt)
    if not isinstance(text, str):
        raise ChatTemplateError(f"apply_chat_template(tokenize=False) returned {type(text)}, "
                                "expected str.")
    return text


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` as-is: special-token strings map to their ids, no BOS/EOS added."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def end_of_turn_id(tokenizer: Any) -> int:
    """The token that ends an assistant turn (the sampler's stop token): the tokenizer's eos."""
    eot = tokenizer.eos_token_id
    if eot is None:
        raise ChatTemplateError("The tokenizer has no eos_token; set it to the chat template's "
                                "end-of-turn token (e.g. '<|im_end|>').")
    return int(eot)


def head_text(tokenizer: Any, messages: Sequence[Message], eot_text: str) -> str:
    """Rendering of ``messages`` (ending on an assistant turn) cut right after its end-of-turn text.

    This is exactly what the token sequence holds after the agent's last sampled token.
    """
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError("head_text needs a conversation that ends on an assistant message.")
    text = render(tokenizer, messages, add_generation_prompt=False)
    needle = messages[-1]["content"] + eot_text
    idx = text.rfind(needle)
    if idx < 0:
        raise ChatTemplateError(
            f"The chat template does not render the assistant message followed by the end-of-turn "
            f"token {eot_text!r}; token-in/token-out needs the template to keep the sampled text "
            "verbatim and end assistant turns with the tokenizer's eos. Fix tokenizer.eos_token.")
    return text[:idx + len(needle)]


def reply_delta_text(tokenizer: Any, messages: Sequence[Message], observation: str,
                     eot_text: str) -> str:
    """Text the environment's reply adds after the agent's end-of-turn token.

    delta = render(messages + [user(obs)], generation_prompt)[len(head_text(messages)):]
    Raises :class:`ChatTemplateError` if the old rendering is not a prefix of the new one.
    """
    head = head_text(tokenizer, messages, eot_text)
    full = render(tokenizer, list(messages) + [user_message(observation)],
                  add_generation_prompt=True)
    if not full.startswith(head):
        raise ChatTemplateError(
            "The chat template re-renders earlier turns when a message is added (its rendering "
            "is not a prefix of the next one), so sampled tokens cannot be kept as-is. Use a "
            "template without that property (e.g. ChatML) or ChatFormat.window with a fresh prompt.")
    return full[len(head):]


def reply_delta_ids(tokenizer: Any, messages: Sequence[Message], observation: str,
                    eot_id: int) -> list[int]:
    """Token ids of :func:`reply_delta_text` (tokenized on its own; special tokens split it)."""
    eot_text = tokenizer.decode([eot_id], skip_special_tokens=False)
    return encode(tokenizer, reply_delta_text(tokenizer, messages, observation, eot_text))


def prompt_ids(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """Ids of the rendering of ``messages`` (ending on a user turn) with the generation prompt."""
    if not messages or messages[-1]["role"] != "user":
        raise ValueError("prompt_ids needs a conversation that ends on a user message.")
    return encode(tokenizer, render(tokenizer, messages, add_generation_prompt=True))


def conversation_text(tokenizer: Any, messages: Sequence[Message], eot_id: int) -> str:
    """The text an episode's tokens decode to: the rendering cut after the last end-of-turn.

    Ends on an assistant turn: :func:`head_text`; ends on a user turn: the generation prompt.
    """
    if messages[-1]["role"] == "assistant":
        return head_text(tokenizer, messages, tokenizer.decode([eot_id], skip_special_tokens=False))
    return render(tokenizer, messages, add_generation_prompt=True)


def window_start(num_done_turns: int, window: int | None) -> int:
    """Index s of the first kept turn: the prompt holds obs_s and turns s+1..t (t = done turns)."""
    if window is None:
        return 0
    return max(0, num_done_turns - window)
