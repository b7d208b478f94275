"""permits"""
