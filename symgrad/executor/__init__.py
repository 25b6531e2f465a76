"""Executor layer: compiles a symbol into a flat plan and runs it on bound arrays."""

from .executor import Executor, simple_bind
from .plan import Plan

__all__ = ["Executor", "Plan", "simple_bind"]
