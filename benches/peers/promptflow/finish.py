"""Node `finish` of the promptflow side of the validation benchmark."""
from promptflow.core import tool


@tool
def finish(text: str) -> str:
    return text.strip()
