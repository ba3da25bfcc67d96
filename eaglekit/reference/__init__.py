"""The reference forward of EAGLE 3 / 3.1 drafters and the greedy acceptance simulation."""
