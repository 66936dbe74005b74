from provision.cli import main

main(prog_name="provision")  # `python -m provision` says "Usage: provision ...", as the command does
