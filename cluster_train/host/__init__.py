"""Host side (login node): no torch. Resolve, check, render and submit jobs; the image store; run manifests."""
