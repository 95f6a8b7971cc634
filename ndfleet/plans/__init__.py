"""Building the plan under Pulumi mocks, the plan document, the plan diff and the policy rules."""
