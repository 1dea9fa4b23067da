from envlock.cli import main

main()
