"""Reading Azure: the one place the tool talks to Resource Manager, a workspace's query API or the Retail Prices
API. `clouds` (which cloud and subscription), `auth` (credentials), `errors` (CannotCheck), `arm` (the Resource
Manager pipeline, paging and its error lines), `http` (the bounded transport and pipeline policies every call goes
through: deadline, byte cap, capped Retry-After, tokens only to their own host), `answers` (shape checks of what
came back), `text` (cleaning server text before it reaches a terminal). Used by preflight, status, impact and
cost; nothing here knows a command."""
