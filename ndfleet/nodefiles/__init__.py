"""What is rendered for a node: the bootstrap, the node bundle and program, the node configuration."""
