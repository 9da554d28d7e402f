"""A module for tests/compiler/test_lazy_imports.py to load lazily."""

VALUE = 42


def square(x: int) -> int:
    return x * x
