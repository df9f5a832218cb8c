"""agentops-eval: run AgentOps Studio experiments from CI and gate on their results."""

__version__ = "0.1.0"
