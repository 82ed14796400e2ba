"""The node agent (`oomwatch run`): configuration, the pipeline and its poll loop."""
