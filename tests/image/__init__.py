"""The code that runs inside the image (torch: models, data sets, tasks, strategies) and the image's own build."""
