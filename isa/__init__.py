"""The NeuronCore ISA on its own: instructions, targets, text/binary forms and the emulator.

Nothing here imports the rest of the project.
"""
