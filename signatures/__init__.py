"""mk.signatures"""
