"""Built-in solver backends; each registers under the ``maxshard.backends`` entry point."""
