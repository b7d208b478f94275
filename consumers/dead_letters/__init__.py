"""dead_letters"""
