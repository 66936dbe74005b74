from provision.entry import main

main()
