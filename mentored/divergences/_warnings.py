"""Warning classes shared by modules that must not import each other."""

__all__ = ["NumericCheckWarning"]


class NumericCheckWarning(UserWarning):
    """A property of a user generator was checked numerically, on a grid, not proved symbolically."""
