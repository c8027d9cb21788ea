"""Graph-based MAS: an unmodified OpenAI-client agent program, trained through an OpenAI-compatible
gateway in the trainer (gateway.py over broker.py), run per problem in a child process (child.py)
by the graph runner (runner.py)."""
