"""psychosis-bench: a pytest safety regression suite for chat models."""


__version__ = "0.1.0"
