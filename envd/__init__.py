"""envd: sandboxed execution environments for agent context engines."""
