"""Plan building under Pulumi's mocks, the plan document, plan diffs and policy rules."""
