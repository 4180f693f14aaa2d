"""The Hayhooks side of benches/serve.sh: the same 3-step pipeline as
benches/peers/pagantic/three-steps.yaml — a prompt template, a scripted echo model (answers with
its prompt), and a step that trims the answer — served by Hayhooks at POST /three_steps/run."""

from haystack import Pipeline, component
from haystack.components.builders import PromptBuilder

from hayhooks import BasePipelineWrapper


@component
class Echo:
    """The scripted echo model: its reply is its prompt."""

    @component.output_types(replies=list[str])
    def run(self, prompt: str):
        return {"replies": [prompt]}


@component
class Finish:
    """The answer, trimmed."""

    @component.output_types(text=str)
    def run(self, replies: list[str]):
        return {"text": replies[0].strip()}


class PipelineWrapper(BasePipelineWrapper):
    def setup(self) -> None:
        pipeline = Pipeline()
        pipeline.add_component(
            "prepare", PromptBuilder(template="Question: {{ question }}", required_variables=["question"])
        )
        pipeline.add_component("answer", Echo())
        pipeline.add_component("finish", Finish())
        pipeline.connect("prepare.prompt", "answer.prompt")
        pipeline.connect("answer.replies", "finish.replies")
        self.pipeline = pipeline

    def run_api(self, question: str) -> str:
        """Answers the question (echoed, three steps deep)."""
        return self.pipeline.run({"prepare": {"question": question}})["finish"]["text"]
