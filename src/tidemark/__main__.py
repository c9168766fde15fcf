from tidemark.cli.app import main

main()
