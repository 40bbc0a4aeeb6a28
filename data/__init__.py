"""mk.data"""
