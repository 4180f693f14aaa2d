"""Node `answer` of the promptflow side of the validation benchmark."""
from promptflow.core import tool


@tool
def answer(text: str) -> str:
    return text
