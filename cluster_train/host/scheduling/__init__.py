"""What a scheduler is asked and answers, below the adapters that speak to one (issue 57 item 5): the resolved job's
typed record (job.py: ResolvedJob, which an adapter renders), the scheduler facts every room reads (facts.py: job
states, the names a directive or a module may take, the built-in schedulers' names), the launch shapes (launches.py)
and the image-signing policy a job carries (signing_policy.py). Torch-free, and importing no other room of the host
but the plain helpers, so the adapters, the cluster files and the settings all import it without a circle."""
