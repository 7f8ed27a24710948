from train.image.cli import main

main()
