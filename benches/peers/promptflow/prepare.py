"""Node `prepare` of the promptflow side of the validation benchmark."""
from promptflow.core import tool


@tool
def prepare(question: str) -> str:
    return f"Question: {question}"
