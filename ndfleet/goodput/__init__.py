"""The goodput report (`ndfleet goodput`, docs/goodput.md): where a stack's paid node-hours went over a period."""
