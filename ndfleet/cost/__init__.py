"""What the stack's VMs cost: the list-price table, the estimate `ndfleet plan` shows, and the Retail Prices API
client behind `ndfleet cost --refresh`."""
