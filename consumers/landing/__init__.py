"""landing"""
