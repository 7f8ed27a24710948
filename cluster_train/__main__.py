from cluster_train.image.cli import main

main()
