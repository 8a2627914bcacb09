"""Golden images: lock, pin, render, build, base bootstrap."""
