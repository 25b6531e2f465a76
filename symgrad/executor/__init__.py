"""Executor layer: compiles a symbol into a flat plan and runs it on bound arrays."""

from .executor import Executor, normalize_grad_req, simple_bind
from .plan import Plan

__all__ = ["Executor", "Plan", "normalize_grad_req", "simple_bind"]
