"""ndfleet's Pulumi program (`pulumi up` runs this file): the program itself is `ndfleet.program.main`."""

from ndfleet.program import main

main()
