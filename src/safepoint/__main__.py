from safepoint.cli.app import main

main()
