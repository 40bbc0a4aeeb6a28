"""mk.programs"""
