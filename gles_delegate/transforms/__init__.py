"""Graph rewrite rules, one module per rule. Each exposes a function that edits a Graph in place."""
