"""Client side of envd: OmniMessage models, the EnvironmentInterface, RemoteEnvironment."""

from engine.interface import EnvironmentInterface, ToolExecutionRequest

__all__ = ["EnvironmentInterface", "ToolExecutionRequest"]
