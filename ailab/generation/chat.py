"""A chat template for the byte-level model: a list of messages made into the one string the model continues.

A language model knows no "messages": it continues text. A chat template is the convention that turns a
conversation into text, the same way at training and at serving time, and says where the model's turn begins:

    <|system|>
    You are terse.
    <|user|>
    Was the film good?
    <|assistant|>
                                      <- the model continues from here

Every message is its role between `<|` and `|>` on a line of its own, then its content and a newline; the
prompt ends with the assistant's marker, so the next bytes the model writes are the assistant's answer. The
answer ends where the model starts another marker (`CHAT_STOP`), so it never speaks the user's next line.
Models trained for chat learn these markers in fine-tuning (Llama's `<|start_header_id|>`, ChatML's
`<|im_start|>`); the course's model was trained on review snippets only, so it will rarely write one: its
answers end at the token limit.
"""

from __future__ import annotations

ROLES = ("system", "user", "assistant")
CHAT_STOP = "\n<|"


def chat_prompt(messages: list[dict]) -> str:
    """[{"role": "user", "content": "..."}, ...] -> the prompt text, ending where the assistant's turn begins.
    Content is a string or OpenAI's list of {"type": "text", "text": ...} parts. ValueError names what is wrong."""
    if not isinstance(messages, list) or not messages:
        raise ValueError('messages must be a non-empty list of {"role": ..., "content": ...} objects')
    lines = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f'messages[{i}] must be an object with "role" and "content"')
        role, content = m["role"], m["content"]
        if role not in ROLES:
            raise ValueError(f"messages[{i}].role must be one of {list(ROLES)}, got {role!r}")
        if isinstance(content, list):
            if not all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
            ):
                raise ValueError(
                    f'messages[{i}].content: only text parts ({{"type": "text", "text": ...}}) '
                    f"are supported by this text-only model"
                )
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}].content must be a string or a list of text parts")
        if "<|" in content:
            raise ValueError(f"messages[{i}].content contains '<|', which this template reserves for role markers")
        lines.append(f"<|{role}|>\n{content}\n")
    return "".join(lines) + "<|assistant|>\n"
