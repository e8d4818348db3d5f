"""Talking to vLLM workers, and a scripted worker that speaks their wire format."""
