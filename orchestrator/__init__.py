"""The orchestrator: the OpenAI Responses API over vLLM workers, with the Harmony turn loop."""
