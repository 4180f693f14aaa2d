"""The three nodes of the promptflow side of the validation benchmark."""
from promptflow.core import tool


@tool
def prepare(question: str) -> str:
    return f"Question: {question}"


@tool
def answer(text: str) -> str:
    return text


@tool
def finish(text: str) -> str:
    return text.strip()
